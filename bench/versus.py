"""``python -m bench.versus OTHER_PYTHON``: this checkout's code against another version's, side
by side, on the peer's burst.

Two deployments of one mode run at once, each with its own database and queue: this checkout's
(the interpreter running the bench) and the one ``OTHER_PYTHON`` imports Tether from (a virtual
environment with another checkout installed, e.g. a ``git worktree`` of the commit to compare
against). The same burst (``peer_posts`` background no-ops at ``concurrency``, then every status
read until terminal, ``bench.peer_load.burst``) goes to each in turn, the order alternating, so a
slow minute of the shared machine slows both sides of a round rather than one side's run.
Before each burst, where the server runs without autovacuum, its side's database gets the
``VACUUM ANALYZE`` autovacuum would have run by then.

Per side it prints the medians of accepts/s, seconds until terminal and server CPU per invocation
(each process's too), and this side's median over the other's. ``--same`` runs this checkout on
both sides: how far two identical deployments differ on this machine, the noise a real
difference must clear. Nothing is written to ``bench/results``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

from bench.procs import Database, Launcher, Proc, launcher, private_database
from bench.scenarios.common import FULL, QUICK, Sizes
from bench.scenarios.peer import serving
from bench.scenarios.sidebyside import Round, one_burst

MODES = {"distributed": "tether-distributed", "dev": "tether-dev"}
PROCESSES = {"distributed": ("worker", "gateway"), "dev": ("dev",)}
WHERE = "import pathlib, tether; print(pathlib.Path(tether.__file__).resolve().parents[1])"


def checkout_of(python: str) -> Path:
    """The checkout ``python`` imports Tether from."""
    try:
        found = subprocess.run([python, "-c", WHERE], capture_output=True, text=True, check=False)
    except OSError as exc:
        raise SystemExit(f"cannot run {python}: {exc.strerror}") from None
    if found.returncode != 0:
        raise SystemExit(f"{python} cannot import tether:\n{found.stderr.strip()}")
    return Path(found.stdout.strip())


def describe(checkout: Path) -> str:
    """The commit a checkout is at, and whether it has uncommitted changes."""
    git = ["git", "-C", str(checkout)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True)
    commit = head.stdout.strip() or "not a git checkout"
    return f"{checkout} at {commit}" + (" with uncommitted changes" if dirty.stdout.strip() else "")


async def alternate(
    launchers: dict[str, Launcher],
    databases: dict[str, Database],
    mode: str,
    sizes: Sizes,
    rounds: int,
) -> dict[str, list[Round]]:
    results: dict[str, list[Round]] = {name: [] for name in launchers}
    with ExitStack() as up:
        servers: dict[str, tuple[list[Proc], str]] = {
            name: up.enter_context(serving(launch, MODES[mode]))
            for name, launch in launchers.items()
        }
        for procs, base in servers.values():
            await one_burst(procs, base, dataclasses.replace(sizes, peer_posts=sizes.peer_warmup))
        names = list(servers)
        for n in range(rounds):
            for name in names if n % 2 == 0 else names[::-1]:
                # as autovacuum would have by now, where it is off
                await asyncio.to_thread(databases[name].vacuum_if_no_autovacuum)
                await asyncio.sleep(1.0)  # the other side's burst has settled
                results[name].append(await one_burst(*servers[name], sizes))
                print(f"[versus] round {n + 1}: {name} {results[name][-1]}", flush=True)
    return results


FIGURES = (
    ("accepts/s", "accepted_per_s"),
    ("s until terminal", "terminal_s"),
    ("CPU ms per invocation", "cpu_ms"),
)


def report(results: dict[str, list[Round]], mode: str) -> str:
    """One line per figure (and per process's CPU): each side's median, this over the other."""

    def line(label: str, mine: float, theirs: float) -> str:
        ratio = mine / theirs if theirs else float("nan")
        return f"{label:<28}{mine:>10.3f}{theirs:>10.3f}{ratio:>12.3f}"

    this, other = results["this"], results["other"]
    lines = [f"{f'median of {len(this)} rounds':<28}{'this':>10}{'other':>10}{'this/other':>12}"]
    for label, attr in FIGURES:
        mine, theirs = (statistics.median(getattr(r, attr) for r in side) for side in (this, other))
        lines.append(line(label, mine, theirs))
    for n, process in enumerate(PROCESSES[mode]):
        mine, theirs = (statistics.median(r.cpu_ms_each[n] for r in side) for side in (this, other))
        lines.append(line(f"  of which {process}", mine, theirs))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.versus", description=__doc__)
    parser.add_argument("other", nargs="?", help="the other install's Python interpreter")
    parser.add_argument("--mode", choices=sorted(MODES), default="distributed")
    parser.add_argument("--rounds", type=int, default=8, help="bursts per side (default 8)")
    parser.add_argument("--same", action="store_true", help="this checkout on both sides")
    parser.add_argument("--quick", action="store_true", help="tiny bursts, to try it out")
    args = parser.parse_args(argv)
    if args.same == bool(args.other):
        parser.error("give the other install's Python interpreter, or --same (not both)")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    other = sys.executable if args.same else args.other
    here, there = checkout_of(sys.executable), checkout_of(other)
    if here == there and not args.same:
        parser.error(f"{other} runs this checkout too ({here}); use --same to measure noise")
    print(f"[versus] this:  {describe(here)}\n[versus] other: {describe(there)}", flush=True)
    sizes = QUICK if args.quick else FULL
    with ExitStack() as stack:
        launchers, databases = {}, {}
        for name, python in (("this", sys.executable), ("other", other)):
            db = databases[name] = stack.enter_context(private_database())
            launchers[name] = stack.enter_context(launcher(db, python=python))
        results = asyncio.run(alternate(launchers, databases, args.mode, sizes, args.rounds))
    print(report(results, args.mode))
    return 0


if __name__ == "__main__":
    sys.exit(main())
