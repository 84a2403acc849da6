"""``AgentApp.on_shutdown``: what handlers keep open across invocations is closed by the node
that ran them, after its attempts drained (the agent runtime's MCP connections use it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether import AgentApp, InvocationContext
from tether.cli.compose import dev_app
from tether.settings import load_settings


async def test_handlers_run_last_registered_first_and_one_failure_stops_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, ran = AgentApp(name="a"), []

    @app.on_shutdown
    async def first() -> None:
        ran.append("first")

    @app.on_shutdown
    async def broken() -> None:
        ran.append("broken")
        raise RuntimeError("secret detail")

    await app.shutdown()
    assert ran == ["broken", "first"]
    assert "RuntimeError" in caplog.text and "secret detail" not in caplog.text


async def test_the_dev_node_runs_them_when_it_stops(aiohttp_client: Any, tmp_path: Path) -> None:
    app, closed = AgentApp(name="a"), []

    @app.invoke
    async def invoke(value: Any, ctx: InvocationContext) -> Any:
        return value

    @app.on_shutdown
    async def close() -> None:
        closed.append(True)

    settings = load_settings(
        None, embedded_path=str(tmp_path / "t.db"), timers={"shutdown_grace": 0.2}
    )
    client = await aiohttp_client(dev_app(settings, app))
    assert (await client.get("/healthz")).status == 200 and closed == []
    await client.close()
    assert closed == [True]
