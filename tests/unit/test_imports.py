"""The floor plan, enforced: which package may import which.

- ``tether.gateway`` (gateway/) and ``tether.worker`` (worker/) import ``tether``'s shared core
  (shared/), never each other;
- the shared core imports neither side, nor the agent runtime, nor the composition root;
- the agent runtime (``tether.agents``) is a user of the public handler API only;
- only the composition root (``tether.cli``) wires both sides together;
- nothing of the product imports the tests or the benchmark, and the tests' harness does not
  import the benchmark;
- no generic top-level name (``shared``, ``gateway``, ``worker``) is imported anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tether

ROOT = Path(__file__).resolve().parents[2]
SIDES = ("tether.gateway", "tether.worker")
PUBLIC_HANDLER_API = {"tether", "tether.jsonvalue", "tether.usage"}


def imports_of(folder: str) -> dict[str, set[str]]:
    """Every absolute module name each file under ``folder`` imports (``a.b`` for ``from a.b
    import c``, and ``a.b.c`` too when ``c`` is a module of ``a.b``)."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
        found[str(path.relative_to(ROOT))] = names
    return found


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def shared_core() -> dict[str, set[str]]:
    return {
        path: names
        for path, names in imports_of("shared").items()
        if not path.startswith(("shared/cli/", "shared/agents/"))
    }


def test_the_shared_core_imports_no_side_no_agent_runtime_and_no_composition_root() -> None:
    for path, names in shared_core().items():
        for name in names:
            forbidden = (*SIDES, "tether.cli", "tether.agents")
            assert not any(within(name, p) for p in forbidden), f"{path} imports {name}"


def test_gateway_and_worker_do_not_import_each_other_or_the_composition_root() -> None:
    for folder, other in (("gateway", "tether.worker"), ("worker", "tether.gateway")):
        for path, names in imports_of(folder).items():
            for name in names:
                assert not within(name, other), f"{path} imports {name}"
                assert not within(name, "tether.cli"), f"{path} imports {name}"
                assert not within(name, "tether.agents"), f"{path} imports {name}"


def test_the_agent_runtime_uses_only_the_public_handler_api() -> None:
    for path, names in imports_of("shared/agents").items():
        for name in names:
            if within(name, "tether") and not within(name, "tether.agents"):
                parent, _, leaf = name.rpartition(".")
                public = (
                    name in PUBLIC_HANDLER_API
                    or (parent == "tether" and leaf in tether.__all__)
                    or (parent in PUBLIC_HANDLER_API - {"tether"})
                )
                assert public, f"{path} imports {name}"


def test_nothing_imports_generic_top_level_names_the_tests_or_the_benchmark() -> None:
    for folder in ("shared", "gateway", "worker", "examples", "migrations"):
        for path, names in imports_of(folder).items():
            for name in names:
                top = name.split(".")[0]
                assert top not in {"shared", "gateway", "worker", "tests", "bench"}, (
                    f"{path} imports {name}"
                )


def test_the_test_harness_does_not_import_the_benchmark() -> None:
    for path, names in imports_of("tests").items():
        assert not any(within(name, "bench") for name in names), f"{path} imports the benchmark"
