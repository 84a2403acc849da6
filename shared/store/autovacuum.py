"""Whether PostgreSQL's autovacuum looks after Tether's tables.

Tether's tables churn. Each invocation's row is rewritten as it is claimed and as it ends (a
dead row version each time, and dead entries in the partial indexes that find queued and
running work); open counts, tenants' passes and usage, workers' heartbeats and threads are
updated in place; the event log is appended to and, at retention, deleted from. Autovacuum
reclaims the dead versions and keeps the planner's statistics current. Without it the dead
versions pile up, and a statement planned while a table was small keeps that plan as the table
grows (what that cost in a benchmark: docs/operations.md, "Vacuum").

Each ``tether worker`` checks once at start (in its first worker process, however many it runs)
and logs a warning naming what is off (:func:`warning_text`); ``tether migrate`` prints it. The
embedded SQLite store has nothing to check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from tether.store.connection import Connection
from tether.store.schema import metadata

_SERVER = sa.text(
    "SELECT current_setting('autovacuum') AS autovacuum, "
    "current_setting('track_counts') AS track_counts"
)
_TABLES = sa.text(
    "SELECT t.relname, c.reloptions, toast.reloptions AS toast_options "
    "FROM unnest(CAST(:names AS text[])) AS t(relname) "
    "JOIN pg_class AS c ON c.oid = to_regclass(t.relname) "
    "LEFT JOIN pg_class AS toast ON toast.oid = c.reltoastrelid"
)


@dataclass(frozen=True, slots=True)
class Coverage:
    """What autovacuum leaves alone: the server-wide settings that stop it (``autovacuum``, or
    ``track_counts``, which it needs), and Tether's tables that opt out
    (``autovacuum_enabled``, or ``toast.autovacuum_enabled`` for the table's out-of-line
    values: a large input, output or event lives there)."""

    settings_off: tuple[str, ...] = ()
    tables_off: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.settings_off and not self.tables_off


async def coverage(conn: Connection) -> Coverage:
    """Read the server's settings and the storage options of every table of Tether's schema
    (PostgreSQL; tables are found on the connection's ``search_path``, as every statement finds
    them)."""
    server = (await conn.execute(_SERVER)).one()
    settings_off = tuple(
        name for name in ("autovacuum", "track_counts") if str(getattr(server, name)) != "on"
    )
    rows = await conn.execute(_TABLES, {"names": sorted(metadata.tables)})
    tables_off = tuple(
        sorted(
            row.relname
            for row in rows
            if _opted_out(row.reloptions or ()) or _opted_out(row.toast_options or ())
        )
    )
    return Coverage(settings_off, tables_off)


def _opted_out(options: Sequence[str]) -> bool:
    for option in options:
        name, _, value = option.partition("=")
        if name.strip().lower() == "autovacuum_enabled" and _false(value.strip().lower()):
            return True
    return False


def _false(value: str) -> bool:
    """PostgreSQL's spellings of false: any prefix of ``false`` or ``no``, ``of``/``off``, ``0``."""
    if not value:
        return False
    return (
        "false".startswith(value)
        or "no".startswith(value)
        or (len(value) >= 2 and "off".startswith(value))
        or value == "0"
    )


def warning_text(found: Coverage) -> str | None:
    """The operator's warning, or None when autovacuum covers every table of Tether's."""
    if found.complete:
        return None
    off = []
    if found.settings_off:
        what = " and ".join(f"{name} = off" for name in found.settings_off)
        off.append(f"PostgreSQL runs with {what}, so autovacuum runs only to prevent wraparound")
    if found.tables_off:
        off.append(f"autovacuum_enabled is off for {', '.join(found.tables_off)}")
    return (
        f"{'; '.join(off)}: dead row versions pile up and the planner's statistics go stale, "
        "and claims, finishes and status reads slow down as the tables grow; turn it on, or "
        "run VACUUM ANALYZE on Tether's tables on a schedule (docs/operations.md, 'Vacuum')"
    )
