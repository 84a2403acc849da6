"""The baseline accept server: a bare aiohttp handler doing one PostgreSQL insert and one
Dramatiq enqueue per request, and nothing else (no validation model, no idempotency, no metrics).

It is the leanest honest version of the same I/O Tether's ``POST /api/invocations`` does, so
the ratio Tether / baseline is what Tether's own work costs. It enqueues real Dramatiq messages
(the ``noop`` actor of ``bench.bare_worker``) with Dramatiq's own Lua script, awaited on an
asyncio Redis client, so the end-to-end baseline can feed bare Dramatiq workers.

Run as ``python -m bench.baselines --port P --processes N --database URL --redis URL --queue Q``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import dramatiq
import psycopg
import redis.asyncio as aioredis
from aiohttp import web

BARE_ACTOR = "noop"
POOL_SIZE = 10
TABLE = "bench_accepted"
DISPATCH_LUA = Path(dramatiq.__file__).parent / "brokers" / "redis" / "dispatch.lua"


class DramatiqEnqueuer:
    """Dramatiq's RedisBroker.enqueue, as one awaited EVALSHA of its own dispatch script."""

    def __init__(self, redis_url: str) -> None:
        self.client = aioredis.Redis.from_url(redis_url)
        self.script = self.client.register_script(DISPATCH_LUA.read_bytes())
        self.broker_id = str(uuid.uuid4())

    async def enqueue(self, queue: str, actor: str, args: tuple[object, ...]) -> None:
        redis_id = str(uuid.uuid4())
        message: dramatiq.Message[None] = dramatiq.Message(
            queue_name=queue,
            actor_name=actor,
            args=args,
            kwargs={},
            options={"redis_message_id": redis_id},
        )
        argv: list[str | int | bytes] = [
            "enqueue",
            int(time.time() * 1000),
            queue,
            self.broker_id,
            60000,
            604800000,
            0,
            3000,
            redis_id,
            message.encode(),
        ]
        await self.script(keys=["dramatiq"], args=argv)


def create_app(database_url: str, redis_url: str, queue: str) -> web.Application:
    app = web.Application()
    pool: asyncio.Queue[psycopg.AsyncConnection[object]] = asyncio.Queue()

    async def resources(app: web.Application) -> AsyncIterator[None]:
        for _ in range(POOL_SIZE):
            pool.put_nowait(await psycopg.AsyncConnection.connect(database_url, autocommit=True))
        enqueuer = DramatiqEnqueuer(redis_url)
        app["enqueuer"] = enqueuer
        yield
        await enqueuer.client.aclose()
        while not pool.empty():
            await pool.get_nowait().close()

    async def accept(request: web.Request) -> web.Response:
        body = await request.json()
        invocation_id = str(body["id"])
        conn = await pool.get()
        try:
            await conn.execute(
                f"INSERT INTO {TABLE} (id, body, created_at) VALUES (%s, %s, %s)",
                (invocation_id, json.dumps(body.get("input")), time.time()),
            )
        finally:
            pool.put_nowait(conn)
        await app["enqueuer"].enqueue(queue, BARE_ACTOR, (invocation_id,))
        return web.json_response({"id": invocation_id, "status": "queued"}, status=202)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app.cleanup_ctx.append(resources)
    app.router.add_post("/api/invocations", accept)
    app.router.add_get("/healthz", healthz)
    return app


def create_table(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} "
            "(id text PRIMARY KEY, body jsonb NOT NULL, created_at double precision NOT NULL)"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--database", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--queue", required=True)
    args = parser.parse_args()
    create_table(args.database)
    # The same layout as `tether gateway --processes N`: one listening socket, N forked children.
    sock = socket.socket(socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(1024)
    children = []
    for _ in range(args.processes):
        pid = os.fork()
        if pid == 0:
            web.run_app(create_app(args.database, args.redis, args.queue), sock=sock, print=None)
            os._exit(0)
        children.append(pid)
    try:
        for pid in children:
            os.waitpid(pid, 0)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
