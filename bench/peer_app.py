"""The peer: Databricks AgentKit's ``DurableAgentServer`` serving the bench's no-op and emitter.

Run as ``python -m bench.peer_app --port P --store memory|postgres [--database URL]``. It is the
server as AgentKit's own templates run it (``uvicorn.run(app, ...)``, one process, uvicorn's
defaults, access log included), with the same handlers as ``bench/apps.py``:

- ``memory``: ``InMemoryRuntimeStore``, what ``agentbricks dev`` selects;
- ``postgres``: ``LakebaseDurableRuntimeStore`` on a plain PostgreSQL database. The store takes
  any object with an ``engine`` and ``create_schema()`` as its ``lakebase`` (no Databricks
  credentials here); the engine is built as AgentKit builds its own (``pool_pre_ping=True``,
  SQLAlchemy's default pool) and the store creates its own tables.

The handler is ``bench.apps.noop_or_ticks``, the very function Tether runs in the scenario: a
no-op for ``{}``, N timestamped ticks for ``{"events": N, "interval": s}``.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.apps import noop_or_ticks

SCHEMA = "bench_agentkit"


class PlainPostgres:
    """What ``LakebaseDurableRuntimeStore(lakebase=...)`` needs, on a plain PostgreSQL URL."""

    def __init__(self, url: str, schema: str) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        self.engine = create_async_engine(url, pool_pre_ping=True)
        self._schema = schema

    async def create_schema(self) -> None:
        from sqlalchemy import text

        async with self.engine.begin() as connection:
            await connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {self._schema}"))


def build(store: str, database: str | None) -> Any:
    from databricks_agentkit.runtime.app import DurableAgentServer
    from databricks_agentkit.runtime.auth import InvocationAuthPolicy

    runtime_store: Any
    if store == "postgres":
        from databricks_agentkit.runtime.durability.lakebase_runtime_store import (
            LakebaseDurableRuntimeStore,
        )

        assert database, "--database is required with --store postgres"
        url = database.replace("postgresql://", "postgresql+psycopg://", 1)
        runtime_store = LakebaseDurableRuntimeStore(
            schema=SCHEMA, lakebase=PlainPostgres(url, SCHEMA)
        )
    else:
        from databricks_agentkit.runtime.store import InMemoryRuntimeStore

        runtime_store = InMemoryRuntimeStore()
    # no agent.toml here: no request-user tools, as AgentKit decides when it finds no manifest
    app = DurableAgentServer(runtime_store=runtime_store, auth_policy=InvocationAuthPolicy())
    app.invoke(noop_or_ticks)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", choices=("memory", "postgres"), required=True)
    parser.add_argument("--database")
    args = parser.parse_args()
    import uvicorn

    uvicorn.run(build(args.store, args.database), host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
