"""The embedded store's asynchronous engines' SQLite calls, run on the event loop's own thread.

These engines run migrations and serve whoever uses ``Store.engine`` directly (tests); the
store's own transactions and reads go through :mod:`.sqlite_sync`, which skips SQLAlchemy's
asyncio layer as well.

aiosqlite gives each connection a thread and sends it every call: a statement costs three or
four hops between the loop and that thread (execute, fetch, close the cursor), each a queue put,
a wake-up and a ``call_soon_threadsafe`` back, all under the GIL the loop wants too. Measured
under ``tether dev`` (one sync no-op at a time), a transaction took 3-5 ms that way, where SQLite
itself commits one in 20 microseconds (WAL, ``synchronous=NORMAL``): the hops were the cost.

:class:`InlineConnection` runs every call at once on the caller's thread instead; sqlite3
releases the GIL while SQLite works. aiosqlite's thread still opens and closes the connection,
and serves what SQLAlchemy hands it directly (setting the isolation level).

What this asks of the store, and why it holds:

- A call must not wait long for a lock, since the loop waits with it. The writer is the one
  connection that takes the database's write lock (``BEGIN IMMEDIATE``, pool of one), so no
  other connection of the loop ever holds it; readers in WAL mode neither block nor are blocked
  by it. What can hold the lock is another thread or process on the same file (the heartbeat
  thread's store, a second ``tether`` command), for the span of one short transaction.
- A call holds the loop for as long as SQLite works on it. Most are small (a row, a page of
  events, a batch of at most 256 writes); the largest is a retention transaction, bounded to 500
  expired invocations and 5,000 events (:mod:`.maintenance`: ~20-30 ms on two shared cores,
  and the reaper then leaves the loop alone as long); unbounded, 100 invocations of 4,000
  events held it ~0.3 s (docs/performance.md, "Retention of chatty invocations").
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import aiosqlite

BUSY_TIMEOUT_S = 30.0
"""How long a call waits for another thread's or process's write lock before failing."""


class InlineConnection(aiosqlite.Connection):
    """An aiosqlite connection whose calls run on the calling thread (see the module's text)."""

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        return fn(*args, **kwargs)


def inline_creator(path: str) -> Callable[[], Awaitable[aiosqlite.Connection]]:
    """An ``async_creator`` for SQLAlchemy: a new :class:`InlineConnection` to ``path``."""

    def connect() -> sqlite3.Connection:
        # used from the loop's thread, opened and closed on aiosqlite's
        return sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)

    async def create() -> aiosqlite.Connection:
        connection = InlineConnection(connect, iter_chunk_size=64)
        connection._thread.daemon = True  # as SQLAlchemy sets it on the connections it makes
        return await connection

    return create
