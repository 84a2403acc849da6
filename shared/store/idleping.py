"""Pessimistic disconnect handling for PostgreSQL, paid only by connections that sat idle.

SQLAlchemy's ``pool_pre_ping`` pings on every checkout: a round trip before every transaction,
though a connection that was in use a moment ago is as alive as a ping would show. Here a
connection is pinged only when it was checked in longer than :data:`PING_IDLE_AFTER` ago (the
case a restarted or failed-over server leaves behind); a failed ping makes the pool throw it
away and connect anew (``DisconnectionError``: SQLAlchemy retries the checkout). A connection
that dies while in constant use fails its statement instead, as it would after any ping, and
SQLAlchemy then invalidates every connection the pool held. A ping that has no answer within
:data:`PING_WITHIN` (a server that stopped answering without refusing) fails too, its socket shut
down, and the checkout goes on to connect anew (within the store's deadline, ``.engine._lent``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tether.store.pg_direct import shut_down

PING_IDLE_AFTER = 1.0
"""Seconds a connection may sit in the pool and still be handed out without a ping."""
PING_WITHIN = 2.0
"""Seconds a ping may take: an empty statement, answered in a millisecond by a server that
answers at all."""

_IDLE_SINCE = "tether_idle_since"


def ping_when_idle(engine: AsyncEngine, idle_after: float = PING_IDLE_AFTER) -> None:
    """Ping a pooled connection of ``engine`` at checkout if it sat idle over ``idle_after`` s."""
    sync_engine = engine.sync_engine

    @sa.event.listens_for(sync_engine, "checkin")
    def checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @sa.event.listens_for(sync_engine, "checkout")
    def checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get(_IDLE_SINCE)
        if since is None or time.monotonic() - since <= idle_after:
            return
        unanswered = asyncio.get_running_loop().call_later(
            PING_WITHIN, shut_down, dbapi_connection.driver_connection
        )
        try:
            alive = sync_engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise sa.exc.DisconnectionError("an idle pooled connection failed its ping") from exc
        finally:
            unanswered.cancel()
        if not alive:
            raise sa.exc.DisconnectionError("an idle pooled connection failed its ping")
