"""The handler API: ``AgentApp`` holds the invoke and recover handlers and custom gateway routes."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.context import InvocationContext

log = logging.getLogger(__name__)
Handler = Callable[[Any, "InvocationContext"], Awaitable[Any]]
RouteHandler = Callable[..., Awaitable[Any]]
ShutdownHandler = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: RouteHandler


@dataclass
class AgentApp:
    """An agent service.

    ``@app.invoke`` runs each invocation; ``@app.recover`` runs replacement attempts.
    """

    name: str = "tether-app"
    invoke_handler: Handler | None = None
    recover_handler: Handler | None = None
    routes: list[Route] = field(default_factory=list)
    shutdown_handlers: list[ShutdownHandler] = field(default_factory=list)

    def invoke(self, fn: Handler) -> Handler:
        self.invoke_handler = fn
        return fn

    def recover(self, fn: Handler) -> Handler:
        self.recover_handler = fn
        return fn

    def route(self, method: str, path: str) -> Callable[[RouteHandler], RouteHandler]:
        """Add a custom gateway route (an aiohttp handler taking the request)."""

        def register(fn: RouteHandler) -> RouteHandler:
            self.routes.append(Route(method.upper(), path, fn))
            return fn

        return register

    def on_shutdown(self, fn: ShutdownHandler) -> ShutdownHandler:
        """Run ``await fn()`` when a process that runs this app's invocations stops, after its
        attempts drained: close what the handlers keep open across invocations (connections).
        Handlers run last-registered first, on the loop that ran the invocations."""
        self.shutdown_handlers.append(fn)
        return fn

    async def shutdown(self) -> None:
        """Run the shutdown handlers; one that fails is logged (by type) and the rest still run."""
        for fn in reversed(self.shutdown_handlers):
            try:
                await fn()
            except Exception as exc:  # a handler's own failure must not stop the others
                log.warning("app %r: a shutdown handler failed (%s)", self.name, type(exc).__name__)

    def warn_if_unrecoverable(self) -> None:
        """Say at start, once per process, what happens to this app's runs when a worker dies."""
        if self.recover_handler is None:
            log.warning(
                "app %r has no @app.recover handler: a run whose worker dies fails with "
                "worker_lost",
                self.name,
            )

    def handler_for(self, is_recovery: bool) -> Handler | None:
        """The handler that runs an attempt: ``@app.invoke`` for the first one and for one resumed
        after a wait (it replays what was recorded), ``@app.recover`` for a replacement after a
        crash; ``None`` means the attempt cannot run."""
        return self.recover_handler if is_recovery else self.invoke_handler


class AppLoadError(RuntimeError):
    """The ``module:attribute`` spec does not name an AgentApp."""


def load_app(spec: str) -> AgentApp:
    """Import an AgentApp from ``module:attribute``, with the current directory importable."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise AppLoadError(f"app spec {spec!r} must look like 'module:attribute'")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppLoadError(f"cannot import module {module_name!r}: {exc}") from exc
    app: Any = module
    for part in attribute.split("."):
        app = getattr(app, part, None)
        if app is None:
            raise AppLoadError(f"module {module_name!r} has no attribute {attribute!r}")
    if not isinstance(app, AgentApp):
        raise AppLoadError(f"{spec!r} is a {type(app).__name__}, not an AgentApp")
    if app.invoke_handler is None:
        raise AppLoadError(f"{spec!r} has no @app.invoke handler")
    return app
