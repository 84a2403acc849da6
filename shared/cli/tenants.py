"""``tether tenants list | show NAME | set NAME ... | set --defaults ... | set --global ... |
remove NAME``: tenants' limits, straight on the database (PostgreSQL from ``--database-url`` or
the settings, or ``tether dev``'s SQLite file with ``--db``). Every process applies a change
within a second, with no restart (docs/operations.md "Tenants and limits").

A value no tenant may have is refused before anything is written, with the field and why, and
exit status 2; a database that cannot be used is exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.settings import Settings, load_settings

if TYPE_CHECKING:  # the drivers are imported only once a command runs
    from tether.store.store import Store
    from tether.store.tenants import OpenCounts, TenantLimits, TenantRow

LIMIT_OPTIONS: dict[str, tuple[Callable[[str], Any], str]] = {
    "weight": (float, "share of busy workers against other busy tenants (default 1)"),
    "max_active": (int, "attempts running at once"),
    "max_queued": (int, "open invocations (queued, running, waiting); more get 429"),
    "rate": (float, "accepts per second, sustained"),
    "burst": (int, "accepts at once after a quiet spell (default: rate, rounded up)"),
    "tokens_per_invocation": (int, "model tokens one agent run may use"),
    "tokens_per_period": (int, "model tokens per budget period"),
    "cost_per_period": (float, "model cost per budget period"),
    "budget_period": (float, "seconds per budget period"),
    "on_budget": (str, "fail or park, past a budget"),
}
LIFT = "none"


class Refused(ValueError):
    """A command line that asks for something no tenant may have."""


def add_parser(sub: Any, config: argparse.ArgumentParser) -> None:
    """``tether tenants``; ``config``: the parent parser of ``--config`` after a command's name."""
    tenants = sub.add_parser("tenants", help=cmd_tenants.__doc__, parents=[config])
    where = argparse.ArgumentParser(add_help=False, parents=[config])
    where.add_argument("--database-url", help="PostgreSQL URL (default: database_url setting)")
    where.add_argument("--db", help="the SQLite file of `tether dev` instead")
    where.add_argument("--json", action="store_true", help="print JSON")
    verbs = tenants.add_subparsers(dest="verb", required=True)
    verbs.add_parser("list", parents=[where], help="every tenant with limits or open work")
    verbs.add_parser("show", parents=[where], help="one tenant").add_argument("name")
    setter = verbs.add_parser("set", parents=[where], help="change limits (none lifts one)")
    setter.add_argument("name", nargs="?", help="the tenant")
    which = setter.add_mutually_exclusive_group()
    which.add_argument("--defaults", action="store_true", help="the defaults of every tenant")
    which.add_argument("--global", dest="global_", action="store_true", help="global max-active")
    for name, (_, text) in LIMIT_OPTIONS.items():
        setter.add_argument(f"--{name.replace('_', '-')}", dest=name, help=f"{text}, or {LIFT}")
    verbs.add_parser("remove", parents=[where], help="drop a tenant's own limits").add_argument(
        "name"
    )
    tenants.set_defaults(func=cmd_tenants)


def cmd_tenants(args: argparse.Namespace) -> int:
    """Tenants' limits on the database: list, show, set, remove."""
    from tether.cli.service_errors import (
        service_error_message,
        sqlite_error_message,
        unusable_sqlite_file,
    )
    from tether.store.errors import StoreError

    given = args.database_url is not None  # "" too: refused, never the setting instead
    overrides = {"database_url": args.database_url} if given else {}
    settings = load_settings(args.config, **overrides)
    try:
        verb = VERBS[args.verb](args)
    except Refused as exc:
        print(f"tether tenants {args.verb}: {exc}", file=sys.stderr)
        return 2
    if args.db is not None and (unusable := unusable_sqlite_file(args.db)):
        print(f"tether tenants: {unusable}", file=sys.stderr)  # a folder, not SQLite, …
        return 1
    if args.db is not None and not Path(args.db).is_file():
        print(f"tether tenants {args.verb}: --db {args.db!r}: no such file", file=sys.stderr)
        return 2  # (tether dev creates it; this command only reads or changes one)
    try:
        return asyncio.run(on_store(settings, args.db, verb))
    except Refused as exc:
        print(f"tether tenants {args.verb}: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:  # on the SQLite file: opening or migrating it failed
        message = (
            sqlite_error_message(exc, args.db)
            if args.db is not None
            else service_error_message(exc, settings)
        )
        if message is None:
            raise
        print(f"tether tenants: {message}", file=sys.stderr)
        return 1


Verb = Callable[["Store"], Coroutine[Any, Any, int]]


async def on_store(settings: Settings, db: str | None, verb: Verb) -> int:
    from tether.store.store import Store

    if db is not None:
        store = Store.embedded(db)
        await store.migrate()  # as `tether dev` does at start
    else:
        store = Store.postgres(
            settings.database_url, pool_size=1, deadline=settings.timers.store_deadline
        )
    try:
        return await verb(store)
    finally:
        await store.close()


def list_verb(args: argparse.Namespace) -> Verb:
    async def run(store: Store) -> int:
        from tether.store.tenants import DEFAULTS

        rows = {row.tenant: row for row in await store.tenants.rows()}
        counts = await store.tenants.open_counts()
        defaults = rows[DEFAULTS].limits if DEFAULTS in rows else None
        names = sorted({*rows, *counts}, key=lambda n: (n != DEFAULTS, n))
        found = [describe(n, rows.get(n), counts.get(n), defaults) for n in names]
        global_max = await store.tenants.global_max_active()
        if args.json:
            print(json.dumps({"tenants": found, "global_max_active": global_max}, indent=2))
            return 0
        columns = ["tenant", "weight", "max_active", "max_queued", "rate", "burst"]
        print("\t".join([*columns, "queued", "running", "waiting"]))
        for item in found:
            limits, open_ = item["limits"], item["open"]
            cells = [item["tenant"], *(limits[c] for c in columns[1:]), *open_.values()]
            print("\t".join(LIFT if c is None else str(c) for c in cells))
        print(f"global max_active: {LIFT if global_max is None else global_max}")
        return 0

    return run


def show_verb(args: argparse.Namespace) -> Verb:
    name = checked_name(args.name, defaults="`tether tenants list` shows them")

    async def run(store: Store) -> int:
        row = await store.tenants.row(name)
        applied = (await store.tenants.effective([name]))[name]
        item = describe(name, row, (await store.tenants.open_counts([name])).get(name), applied)
        print_item(item, args.json)
        return 0

    return run


def set_verb(args: argparse.Namespace) -> Verb:
    from tether.store.tenants import DEFAULTS, TenantLimits

    changes = {name: parse(name, getattr(args, name)) for name in LIMIT_OPTIONS}
    changes = {name: value for name, value in changes.items() if value is not _UNSET}
    if args.global_:
        return set_global(args, changes)
    if args.defaults and args.name is not None:
        raise Refused(f"--defaults sets the defaults of every tenant: drop the name {args.name!r}")
    if not args.defaults and args.name is None:
        raise Refused("name a tenant, or give --defaults or --global")
    name = DEFAULTS if args.defaults else checked_name(args.name, defaults="use --defaults")
    if not changes:
        raise Refused("nothing to set: give at least one limit (see --help)")
    try:
        TenantLimits().changed(changes)  # the values alone, before the database is opened
    except ValueError as exc:
        raise Refused(str(exc)) from None

    async def run(store: Store) -> int:
        try:
            row = await store.tenants.set(name, changes)
        except ValueError as exc:  # LimitInvalid: with the row it starts from
            raise Refused(str(exc)) from None
        counts = (await store.tenants.open_counts([name])).get(name)  # none for the defaults
        print_item(describe(name, row, counts), args.json)
        return 0

    return run


def set_global(args: argparse.Namespace, changes: dict[str, Any]) -> Verb:
    if args.name is not None or set(changes) != {"max_active"}:
        raise Refused("--global takes --max-active alone, and no tenant name")
    cap = changes["max_active"]

    async def run(store: Store) -> int:
        try:
            await store.tenants.set_global_max_active(cap)
        except ValueError as exc:
            raise Refused(str(exc)) from None
        value = await store.tenants.global_max_active()
        shown = LIFT if value is None else value  # as `list` prints it
        print(json.dumps({"max_active": value}) if args.json else f"global max_active: {shown}")
        return 0

    return run


def remove_verb(args: argparse.Namespace) -> Verb:
    name = checked_name(args.name, defaults="`tether tenants set --defaults` changes them")

    async def run(store: Store) -> int:
        removed = await store.tenants.remove(name)
        text = "removed its own limits" if removed else "had no limits of its own"
        print(json.dumps({"tenant": name, "removed": removed}) if args.json else f"{name}: {text}")
        return 0

    return run


VERBS: dict[str, Callable[[argparse.Namespace], Verb]] = {
    "list": list_verb,
    "show": show_verb,
    "set": set_verb,
    "remove": remove_verb,
}
_UNSET = object()


def parse(name: str, raw: str | None) -> Any:
    """One option's value: its type, or None for ``none`` (lifts the limit)."""
    if raw is None:
        return _UNSET
    if raw.strip().lower() == LIFT:
        return None
    kind, _ = LIMIT_OPTIONS[name]
    what = "a whole number" if kind is int else "a number"
    refused = Refused(f"--{name.replace('_', '-')}: {raw!r} is not {what} or {LIFT}")
    if kind is not str and (not raw.isascii() or "_" in raw):  # int() reads '3_0' and '٣'
        raise refused  # as 30 and 3; the API's JSON numbers are ASCII digits alone
    try:
        return kind(raw)
    except ValueError:
        raise refused from None


def checked_name(name: str, *, defaults: str) -> str:
    """``name`` if a tenant may have it; ``defaults``: what to do instead when it names the
    defaults (what this verb offers for them: ``show`` and ``remove`` take no --defaults)."""
    from tether.store.tenants import DEFAULTS, check_tenant_name

    try:
        check_tenant_name(name)
    except ValueError as exc:
        raise Refused(str(exc)) from None
    if name == DEFAULTS:
        raise Refused(f"{DEFAULTS!r} names the defaults: {defaults}")
    return name


def describe(
    name: str,
    row: TenantRow | None,
    counts: OpenCounts | None,
    applied: TenantLimits | None = None,
) -> dict[str, Any]:
    """A tenant as printed: its own limits, else ``applied`` (the defaults), and open work."""
    from tether.store.tenants import OpenCounts, TenantLimits

    limits = row.limits if row is not None else applied or TenantLimits()
    counts = counts or OpenCounts()
    return {
        "tenant": name,
        "own_limits": row is not None,
        "limits": limits.to_json(),
        "open": {"queued": counts.queued, "running": counts.running, "waiting": counts.waiting},
    }


def print_item(item: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(item, indent=2))
        return
    own = "its own" if item["own_limits"] else "the defaults"
    print(f"tenant: {item['tenant']} ({own})")
    for name, value in item["limits"].items():
        print(f"  {name}: {LIFT if value is None else value}")
    print("  open: " + ", ".join(f"{k} {v}" for k, v in item["open"].items()))
