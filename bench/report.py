"""Rows of results, the printed table and the JSON file of a run."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from bench.procs import server_settings

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Row:
    """One figure, the baseline measured beside it in the same run, and its target."""

    scenario: str
    figure: str
    value: float
    unit: str
    better: Literal["higher", "lower"]
    baseline: float | None = None
    baseline_label: str = ""
    target: str = ""
    met: bool | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or not self.baseline or math.isnan(self.value):
            return None
        return self.value / self.baseline


def fmt(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".strip()


def table(rows: list[Row]) -> str:
    header = ("scenario", "figure", "value", "baseline", "ratio", "target", "met")
    lines = [header]
    for row in rows:
        ratio = row.ratio
        lines.append(
            (
                row.scenario,
                row.figure,
                fmt(row.value, row.unit),
                fmt(row.baseline, row.unit)
                + (f" ({row.baseline_label})" if row.baseline_label else ""),
                "-" if ratio is None else f"{ratio:.2f}x",
                row.target or "-",
                {True: "yes", False: "NO", None: "-"}[row.met],
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for n, line in enumerate(lines):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict[str, Any]:
    """Where the figures came from."""
    mem_kb = 0
    cpu_model = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    postgres = server_settings()
    packages: dict[str, str | None] = {}
    for name in ("aiohttp", "dramatiq", "SQLAlchemy", "psycopg", "redis", "pydantic"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu_model,
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgresql": postgres["server_version"],
        "autovacuum": postgres["autovacuum"],
        "redis": (
            _run(["redis-cli", "INFO", "server"]).partition("redis_version:")[2].split() or [""]
        )[0],
        "packages": packages,
        "git": _run(["git", "-C", str(RESULTS.parent.parent), "describe", "--always", "--dirty"]),
        "loadavg": os.getloadavg(),
    }


def write(rows: list[Row], *, quick: bool, scenarios: list[str], info: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"{stamp}{'-quick' if quick else ''}.json"
    payload = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": quick,
        "scenarios": scenarios,
        "machine": info,
        "loadavg_after": os.getloadavg(),
        "rows": [{**asdict(r), "ratio": r.ratio} for r in rows],
    }
    path.write_text(json.dumps(payload, indent=2, default=str))
    return path
