"""Apply the plain-SQL migrations in ``migrations/<dialect>/`` and record them in a ledger.

Each file ``NNNN_name.sql`` runs once, in its own transaction, in version order. The ledger
table ``tether_schema_migrations`` says what was applied. The dialect's migration lock (an
advisory lock on PostgreSQL) makes concurrent ``tether migrate`` runs safe.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tether.store.dialect import dialect_named

log = logging.getLogger(__name__)

MIGRATIONS_ENV = "TETHER_MIGRATIONS_DIR"
FILE_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
LEDGER = "tether_schema_migrations"


@dataclass(frozen=True, slots=True)
class Migration:
    version: str
    path: Path

    def statements(self) -> list[str]:
        lines = [
            ln
            for ln in self.path.read_text(encoding="utf-8").splitlines()
            if not ln.strip().startswith("--")
        ]
        return split_statements("\n".join(lines))


DOLLAR_QUOTE = re.compile(r"\$(?:[A-Za-z_][A-Za-z_0-9]*)?\$")


def split_statements(sql: str) -> list[str]:
    """``sql``'s statements: split at each ``;`` outside a dollar-quoted body (PostgreSQL's
    ``DO $$ … $$``, whose own statements end in ``;`` too)."""
    statements: list[str] = []
    start = pos = 0
    while pos < len(sql):
        if sql[pos] == ";":
            statements.append(sql[start:pos])
            start = pos = pos + 1
            continue
        quote = DOLLAR_QUOTE.match(sql, pos)
        if quote is None:
            pos += 1
            continue
        end = sql.find(quote.group(), quote.end())
        pos = len(sql) if end < 0 else end + len(quote.group())  # unclosed: the rest is its body
    statements.append(sql[start:])
    return [s.strip() for s in statements if s.strip()]


def migrations_dir() -> Path:
    configured = os.environ.get(MIGRATIONS_ENV)
    if configured:
        return Path(configured)
    import tether.migrations

    return Path(tether.migrations.__file__).resolve().parent


def find_migrations(dialect: str, root: Path | None = None) -> list[Migration]:
    folder = (root or migrations_dir()) / dialect
    if not folder.is_dir():
        raise FileNotFoundError(f"no migrations folder at {folder}")
    found = []
    for path in sorted(folder.iterdir()):
        match = FILE_NAME.match(path.name)
        if path.suffix == ".sql" and not match:
            raise ValueError(f"migration file name {path.name!r} must look like 0001_name.sql")
        if match:
            found.append(Migration(match.group(1), path))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ValueError(f"duplicate migration versions in {folder}")
    return found


@functools.cache
def newest_version(dialect: str) -> str:
    """The version of this release's newest migration for ``dialect``."""
    return find_migrations(dialect)[-1].version


async def migrate(engine: AsyncEngine) -> list[str]:
    """Apply every pending migration; return the versions applied now."""
    dialect = dialect_named(engine.dialect.name)
    pending = find_migrations(dialect.name)
    applied_now: list[str] = []
    async with engine.begin() as conn:
        await dialect.lock_migrations(conn)  # two runs' IF NOT EXISTS on a fresh database race
        await conn.execute(
            sa.text(
                f"CREATE TABLE IF NOT EXISTS {LEDGER} "
                "(version TEXT PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
        )
    for migration in pending:
        async with engine.begin() as conn:
            await dialect.lock_migrations(conn)
            done = await conn.scalar(
                sa.text(f"SELECT 1 FROM {LEDGER} WHERE version = :v"), {"v": migration.version}
            )
            if done:
                continue
            for statement in migration.statements():  # as written: no parameters, so a `%`
                await conn.exec_driver_sql(  # (a DO block's RAISE) is no placeholder
                    statement, execution_options={"no_parameters": True}
                )
            await conn.execute(
                sa.text(
                    f"INSERT INTO {LEDGER} (version, name, applied_at) "
                    "VALUES (:v, :n, CURRENT_TIMESTAMP)"
                ),
                {"v": migration.version, "n": migration.path.name},
            )
            applied_now.append(migration.version)
            log.info("applied migration %s", migration.path.name)
    await _say_if_newer(engine, newest_version(dialect.name))
    return applied_now


async def _say_if_newer(engine: AsyncEngine, newest: str) -> None:
    """A database a newer release migrated runs this one on as docs/operations.md says (its
    readers ignore what they do not know), but an older release writing to it may be refused
    where the newer added a rule: said once, at start, so a 422 later has its cause logged."""
    async with engine.connect() as conn:
        query = sa.text(f"SELECT version FROM {LEDGER} WHERE version > :v ORDER BY version")
        unknown = [r[0] for r in await conn.execute(query, {"v": newest})]
    if unknown:
        log.warning(
            "the database holds migrations this release does not know (%s): a newer Tether "
            "migrated it; run that release, or expect this one's writes to be refused where "
            "the newer schema asks more",
            ", ".join(unknown),
        )


async def applied_versions(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(sa.text(f"SELECT version FROM {LEDGER} ORDER BY version"))
        return [r[0] for r in rows]
