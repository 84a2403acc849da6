"""``python -m bench [scenario ...] [--quick]``: run scenarios, print one table, write JSON."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import traceback

from bench.report import Row, machine, table, write
from bench.scenarios import SCENARIOS
from bench.scenarios.common import FULL, QUICK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "scenarios",
        nargs="*",
        metavar="scenario",
        help=f"any of: {', '.join(SCENARIOS)} (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a CI smoke run")
    args = parser.parse_args(argv)
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        parser.error(
            f"unknown scenario(s): {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}"
        )
    names = args.scenarios or list(SCENARIOS)
    sizes = QUICK if args.quick else FULL
    info = machine()
    rows: list[Row] = []
    failures = []
    for name in names:
        started = time.monotonic()
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        try:
            got = asyncio.run(SCENARIOS[name](sizes))
        except Exception:
            failures.append(name)
            traceback.print_exc()
            continue
        if args.quick:  # the targets are for the full sizes: a smoke run only shows it works
            for row in got:
                row.met = None
        rows += got
        print(table(got), file=sys.stderr)
        print(f"[bench] {name} took {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    print()
    print(table(rows))
    path = write(rows, quick=args.quick, scenarios=names, info=info)
    print(
        f"\nnproc={info['nproc']} memory={info['memory_gb']} GB python={info['python']} "
        f"postgresql={info['postgresql']} (autovacuum {info['autovacuum']}) redis={info['redis']} "
        f"loadavg={info['loadavg']}"
    )
    print(f"results: {path}")
    if failures:
        print(f"FAILED scenarios: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
