"""The embedded gateway (``tether dev``'s app) served in this process on a loopback port, with
the runner ``web.run_app`` uses: unlike aiohttp's test server, it does not cancel a handler whose
client hung up, so what a hang-up does here is what it does in production."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.apps.contract import app as contract_app
from tether import AgentApp
from tether.cli.compose import dev_app
from tether.settings import load_settings


@dataclass(frozen=True)
class Served:
    base: str
    app: web.Application
    runner: web.AppRunner

    def write_buffers(self) -> list[int]:
        """Bytes each open connection's transport holds, not yet taken by the kernel."""
        server = self.runner.server
        connections = server.connections if server is not None else []
        return [c.transport.get_write_buffer_size() for c in connections if c.transport]


@contextlib.asynccontextmanager
async def served(
    tmp_path: Path, app: AgentApp = contract_app, **overrides: Any
) -> AsyncIterator[Served]:
    overrides.setdefault("timers", {})
    overrides["timers"].setdefault("shutdown_grace", 0.2)
    settings = load_settings(None, embedded_path=str(tmp_path / "t.db"), **overrides)
    web_app = dev_app(settings, app)
    runner = web.AppRunner(web_app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        yield Served(f"http://{host}:{port}", web_app, runner)
    finally:
        await runner.cleanup()
