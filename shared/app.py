"""The handler API: ``AgentApp`` holds the invoke and recover handlers and custom gateway routes."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from tether.agent_surface import AgentsSurface
    from tether.context import InvocationContext
    from tether.settings import AgentSettings, Settings

log = logging.getLogger(__name__)
Handler = Callable[[Any, "InvocationContext"], Awaitable[Any]]
RouteHandler = Callable[..., Awaitable[Any]]
UserAuthUse = Literal["none", "optional", "required"]


class InputRejected(ValueError):
    """Raised by an app's input check: the input cannot run. The message is shown to the
    client (a 422 at POST time), so it must name the problem and nothing secret."""


@dataclass(frozen=True, slots=True)
class InputCheck:
    """What an app says about one input before the gateway accepts it.

    ``user_auth``: ``none`` — the run never uses the caller's credentials (the gateway keeps no
    token for it); ``optional`` — hand it the caller's token when the request carries one;
    ``required`` — refuse the request without one. ``resumes_without_user``: a later attempt
    in a process that does not hold the token (a replacement after a crash, a run resumed after
    a restart) may go on with ``ctx.request_auth`` on the app's credentials only; otherwise it
    fails with ``user_auth_recovery_unsupported``.
    """

    user_auth: UserAuthUse = "optional"
    resumes_without_user: bool = False


InputChecker = Callable[[Any], InputCheck]
StartupCheck = Callable[[], list[str]]
SettingsHook = Callable[["AgentSettings"], None]


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
    input_checker: InputChecker | None = None
    """Validates an input before the gateway accepts it (raises :class:`InputRejected`)."""
    startup_checks: list[StartupCheck] = field(default_factory=list)
    """Problems to report when a gateway or worker starts (each returns warning lines)."""
    settings_hooks: list[SettingsHook] = field(default_factory=list)
    """Called with ``settings.agents`` when a gateway or worker starts (agent limits, default
    model)."""
    agents: AgentsSurface | None = None
    """The agents routes' view of this app (``/api/agents/*``); None for a plain handler app."""

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

    def check_input(self, value: Any) -> InputCheck:
        """The app's verdict on ``value``; raises :class:`InputRejected` for an input it cannot
        run, so the gateway refuses it at POST time instead of queueing a run that would fail."""
        return InputCheck() if self.input_checker is None else self.input_checker(value)

    def configure(self, settings: Settings) -> None:
        """Hand the process's settings to the app's hooks, before it serves anything."""
        for hook in self.settings_hooks:
            hook(settings.agents)

    def report_at_start(self) -> None:
        """Log, once per process, what this app's start-up checks found and what happens to its
        runs when a worker dies."""
        self.warn_if_unrecoverable()
        for check in self.startup_checks:
            try:
                problems = check()
            except Exception as exc:  # a check must never stop the server; say it failed
                log.error("app %r: a start-up check failed (%s)", self.name, type(exc).__name__)
                continue
            for problem in problems:
                log.warning("app %r: %s", self.name, problem)

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
