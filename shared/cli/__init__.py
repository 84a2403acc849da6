"""The ``tether`` command: dev, gateway, worker, migrate, reap, tenants, run-agent."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from tether.app import AgentApp, AppLoadError, load_app
from tether.cli.listen import ListenRefused, check_listen
from tether.cli.serving import serve
from tether.cli.settings_errors import settings_problems
from tether.cli.tenants import add_parser as add_tenants_parser
from tether.gateway.auth import AuthConfigError, resolve_auth
from tether.logs import setup_logging
from tether.loops import UnknownLoop, loop_factory
from tether.settings import Settings, SettingsFileError, UnknownVariable, load_settings

log = logging.getLogger("tether")
DEFAULT_APP = "tether.examples.hello:app"
INSECURE_HELP = (
    "listen on a non-loopback address even with no authentication (every caller is then the "
    "same user; see docs/security.md)"
)


def settings_from(args: argparse.Namespace, **extra: Any) -> Settings:
    overrides: dict[str, Any] = {
        "app": getattr(args, "app", None),
        "host": getattr(args, "host", None),
        "port": getattr(args, "port", None),
        **extra,
    }
    return load_settings(args.config, **overrides)


def agent_app_for(settings: Settings, agents_dir: str | None = None) -> AgentApp:
    """The app `tether dev` serves: the agents in ``agents_dir``, with their skills and MCP
    servers (loopback ones admitted: dev is one user on this machine), else ``settings.app``."""
    if agents_dir:
        from tether.agents import AgentError, build_app_from_dir
        from tether.agents.mcp import McpConfig

        if not Path(agents_dir).is_dir():
            raise AppLoadError(f"--agents {agents_dir!r} is not a folder of Markdown agents")
        skills_dir = settings.agents.skills_dir
        if skills_dir is not None and not Path(skills_dir).is_dir():
            raise AppLoadError(f"skills folder {skills_dir!r} is not a folder")
        mcp = McpConfig(trusted_hosts=settings.agents.mcp_trusted_hosts, allow_localhost=True)
        try:
            return build_app_from_dir(agents_dir, skills_dir=skills_dir, mcp=mcp)
        except AgentError as exc:  # a definition's own message: names the file and the key
            raise AppLoadError(f"--agents {agents_dir!r}: {exc}") from None
    return load_app(settings.app)


def auth_for_listening(command: str, settings: Settings, insecure: bool) -> str:
    """Refuse to serve what anyone could use as anyone; the auth line for the start-up log."""
    auth = resolve_auth(settings.auth)
    check_listen(command, settings.host, auth, insecure)
    return auth.describe()


def cmd_dev(args: argparse.Namespace) -> int:
    """Gateway, worker and reaper in one process on the embedded store (one user, loopback)."""
    from tether.cli.compose import dev_app
    from tether.cli.service_errors import sqlite_error_message, unusable_sqlite_file
    from tether.store.errors import StoreError

    if args.skills and not args.agents:
        raise AppLoadError("--skills is for --agents' agents: give --agents DIR too")
    settings = settings_from(
        args, embedded_path=args.db, agents={"skills_dir": args.skills} if args.skills else None
    )
    if unusable := unusable_sqlite_file(settings.embedded_path):
        print(f"tether dev: {unusable}", file=sys.stderr)
        return 1
    auth = auth_for_listening("tether dev", settings, args.insecure)
    app = agent_app_for(settings, args.agents)
    web_app = dev_app(settings, app)

    def banner(addresses: str) -> None:
        details = f"app {app.name!r}, store {settings.embedded_path}, {auth}"
        print(f"Tether dev server on {addresses} ({details})", flush=True)

    try:
        serve(
            web_app,
            settings,
            host=settings.host,
            port=settings.port,
            shutdown_timeout=5,
            on_listening=banner,
        )
    except StoreError as exc:  # opening or migrating the file failed: the file is what is wrong
        print(f"tether dev: {sqlite_error_message(exc, settings.embedded_path)}", file=sys.stderr)
        return 1
    return 0


def cmd_gateway(args: argparse.Namespace) -> int:
    """The HTTP gateway on PostgreSQL and Redis; ``--processes`` share one port."""
    from tether.cli.compose import gateway_app
    from tether.cli.gateway_processes import serve_processes

    settings = settings_from(args)
    log.info("gateway %s", auth_for_listening("tether gateway", settings, args.insecure))
    app = load_app(settings.app)
    app.configure(settings)
    app.report_at_start()

    if args.processes == 1:

        def listening(addresses: str) -> None:  # the port the system chose for --port 0
            log.info("gateway on %s", addresses)

        web_app = gateway_app(settings, app)
        serve(web_app, settings, on_listening=listening, host=settings.host, port=settings.port)
        return 0
    return serve_processes(settings, lambda: gateway_app(settings, app), args.processes)


def cmd_worker(args: argparse.Namespace) -> int:
    """Dramatiq worker processes running invocations (Dramatiq's own CLI underneath)."""
    from tether.worker.command import worker_command

    settings = settings_from(args)
    load_app(settings.app)  # fail here, clearly, rather than in every child
    command = worker_command(
        settings,
        processes=settings.worker.processes if args.processes is None else args.processes,
        threads=settings.worker.threads if args.threads is None else args.threads,
        config_file=args.config,
        environ=os.environ,
    )
    os.execve(command.argv[0], command.argv, command.env)
    return 0  # not reached


RECOUNT_HELP = (
    "then count every owner's and tenant's open invocations again (the caps read those counts):"
    " after processes of a version before migration 0011 ran on the new schema"
)


def cmd_migrate(args: argparse.Namespace) -> int:
    """Apply pending migrations to PostgreSQL."""
    from tether.store.autovacuum import Coverage, warning_text
    from tether.store.store import Store, StoreError

    settings = settings_from(args)

    async def run() -> tuple[list[str], Coverage | None]:
        store = Store.postgres(settings.database_url, pool_size=1)
        try:
            applied = await store.migrate()
            if args.recount:
                await store.recount_open()
            try:
                return applied, await store.autovacuum_coverage()
            except StoreError as exc:  # migrated all the same: say so, and what went wrong
                print(f"could not read the autovacuum settings: {exc}", file=sys.stderr)
                return applied, None
        finally:
            await store.close()

    applied, found = asyncio.run(run())
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")
    if args.recount:
        print("counted every owner's and tenant's open invocations again")
    if found is not None and (text := warning_text(found)):
        print(f"warning: {text}", file=sys.stderr)
    return 0


def cmd_reap(args: argparse.Namespace) -> int:
    """One reaper pass by hand."""
    from tether.worker.reaper import Reaper
    from tether.worker.wiring import distributed_services

    settings = settings_from(args)
    app = load_app(settings.app)

    async def run() -> None:
        async with distributed_services(settings) as services:
            reaper = Reaper(
                services=services,
                settings=settings,
                has_recover=app.recover_handler is not None,
                audit_now=True,
            )
            print(await reaper.reap_once())

    asyncio.run(run())
    return 0


def cmd_run_agent(args: argparse.Namespace) -> int:
    """Run one agent with no server."""
    from tether.agents.cli import run_agent_command

    return run_agent_command(args.agents, args.agent, args.input)


def cmd_bench(args: argparse.Namespace) -> int:
    """The benchmark suite (bench/ of a source checkout)."""
    if not is_checkout(Path.cwd()):
        print(
            "tether bench: the benchmark suite lives in bench/ of a source checkout; run this "
            "command from the checkout's root (it is not part of the installed package)",
            file=sys.stderr,
        )
        return 2
    argv = [sys.executable, "-m", "bench", *args.bench_args]  # -m: the checkout's bench/
    os.execv(sys.executable, argv)
    return 0  # not reached


def is_checkout(folder: Path) -> bool:
    """Whether ``folder`` is the root of Tether's source checkout (and not a user's project
    that happens to have a ``bench`` package of its own)."""
    import tomllib

    pyproject = folder / "pyproject.toml"
    if not (folder / "bench" / "__main__.py").is_file() or not pyproject.is_file():
        return False
    try:
        project = tomllib.loads(pyproject.read_text()).get("project", {})
    except tomllib.TOMLDecodeError:
        return False
    return bool(project.get("name") == "tether")


CONFIG_HELP = "YAML settings file (also TETHER_CONFIG)"


def at_least_one(text: str) -> int:
    """A count of processes or threads, as argparse reads it: a whole number, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether", description="Tether, a durable agent server.")
    parser.add_argument("--config", help=CONFIG_HELP)
    # --config after a command's name too; SUPPRESS: not given there, the one before it stands
    config = argparse.ArgumentParser(add_help=False)
    config.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, doc: str | None) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=doc, parents=[config])

    def with_app(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--app", help="the AgentApp as module:attribute (also TETHER_APP)")
        return p

    dev = with_app(command("dev", cmd_dev.__doc__))
    dev.add_argument("--host")
    dev.add_argument("--port", type=int)
    dev.add_argument("--db", help="SQLite file (default tether.db), or :memory:")
    dev.add_argument("--agents", help="serve the Markdown agents in this folder")
    dev.add_argument("--skills", help="with --agents: a folder of shared skills (<name>/SKILL.md)")
    dev.add_argument("--insecure", action="store_true", help=INSECURE_HELP)
    dev.set_defaults(func=cmd_dev)

    gw = with_app(command("gateway", cmd_gateway.__doc__))
    gw.add_argument("--host")
    gw.add_argument("--port", type=int)
    gw.add_argument("--processes", type=at_least_one, default=1)
    gw.add_argument("--insecure", action="store_true", help=INSECURE_HELP)
    gw.set_defaults(func=cmd_gateway)

    wk = with_app(command("worker", cmd_worker.__doc__))
    wk.add_argument("--processes", type=at_least_one, help="default: worker.processes")
    wk.add_argument("--threads", type=at_least_one, help="default: worker.threads")
    wk.set_defaults(func=cmd_worker)

    mig = command("migrate", cmd_migrate.__doc__)
    mig.add_argument("--recount", action="store_true", help=RECOUNT_HELP)
    mig.set_defaults(func=cmd_migrate)
    with_app(command("reap", cmd_reap.__doc__)).set_defaults(func=cmd_reap)
    add_tenants_parser(sub, config)

    ra = command("run-agent", cmd_run_agent.__doc__)
    ra.add_argument("input", help="the user message")
    ra.add_argument("--agents", help="folder of Markdown agents")
    ra.add_argument("--agent", help="which agent (default: the default agent)")
    ra.set_defaults(func=cmd_run_agent)
    bench = sub.add_parser("bench", help=cmd_bench.__doc__)
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help="scenarios and --quick")
    bench.set_defaults(func=cmd_bench)
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line; ``tether bench`` hands every argument it does not know to the benchmark
    (argparse's REMAINDER alone would refuse ``tether bench --quick``)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command != "bench":
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "bench":
        args.bench_args = [*args.bench_args, *unknown]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)  # --help has exited by now, before the drivers are imported
    from tether.cli.service_errors import SERVICE_ERRORS, service_error_message

    try:
        settings = load_settings(args.config)
        setup_logging(settings.log_level)
        loop_factory()  # an unknown TETHER_EVENT_LOOP stops here, not in a worker process
        try:
            return int(args.func(args))
        except SERVICE_ERRORS as exc:
            message = service_error_message(exc, settings)
            if message is None:
                raise
            print(f"tether {args.command}: {message}", file=sys.stderr)
            return 1
    except ValidationError as exc:  # the setting and the rule, never the value
        for problem in settings_problems(exc):
            print(f"tether: {problem}", file=sys.stderr)
        return 2
    except (
        SettingsFileError,
        UnknownVariable,
        SettingsError,
        AppLoadError,
        OSError,
        AuthConfigError,
        ListenRefused,
        UnknownLoop,
    ) as exc:
        print(f"tether: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
