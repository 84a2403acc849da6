"""Imports flow one way: gateway → shared, worker → shared; shared imports neither."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported_packages(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


def test_shared_imports_neither_gateway_nor_worker() -> None:
    for path, names in imported_packages("shared").items():
        assert not names & {"gateway", "worker"}, path


def test_gateway_and_worker_do_not_import_each_other() -> None:
    for path, names in imported_packages("gateway").items():
        assert "worker" not in names, path
    for path, names in imported_packages("worker").items():
        assert "gateway" not in names, path
