"""Tether installed the way a user installs it: a wheel built from this checkout, installed with
``pip install`` (not ``-e``) into a fresh virtual environment, and run from outside the checkout.

Nothing is downloaded. The wheel is built with the setuptools of the running (dev) environment
(``--no-build-isolation``), and the fresh venv gets only Tether itself (``--no-deps``): its
third-party dependencies come from the dev environment's site-packages, added by a ``.pth`` file
that lists that folder as a plain path. Python processes the ``.pth`` files of a venv's own
site-packages only, never those of a folder a ``.pth`` line adds, so the dev environment's editable
finder for ``tether`` (``__editable__.tether-*.pth``) is never run: no folder of the checkout is
importable from the fresh venv, and its ``tether`` is the installed one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests.harness import ROOT, Launch

DEPENDENCIES_PTH = "_tether_test_dependencies.pth"
PIP_QUIET = ("--quiet", "--no-index", "--disable-pip-version-check")


@dataclass(frozen=True)
class Installed:
    """A fresh venv holding a non-editable install of Tether."""

    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def tether(self) -> Path:
        return self.venv / "bin" / "tether"

    def launch(self, cwd: Path) -> Launch:
        """Run the installed ``tether`` script from ``cwd``, with no PYTHONPATH at all."""
        return Launch(command=(str(self.tether),), cwd=cwd, pythonpath=None)

    def run(
        self, args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """One ``tether`` command to completion, output captured."""
        launch = self.launch(cwd)
        return subprocess.run(
            [*launch.command, *args],
            cwd=cwd,
            env=launch.env(env or {}),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def source_folders(root: Path) -> list[str]:
    """The checkout's top-level folders the package is built from, read from pyproject.toml's
    ``[tool.setuptools.package-dir]`` (the one place the layout is written down)."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    package_dirs: dict[str, str] = pyproject["tool"]["setuptools"]["package-dir"]
    return sorted({folder.split("/")[0] for folder in package_dirs.values()})


def copy_sources(root: Path, dest: Path) -> Path:
    """What the build reads, copied away from the checkout, so building leaves no ``build/`` or
    ``*.egg-info`` in it and a stale one there cannot end up in the wheel."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(root / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in source_folders(root):
        shutil.copytree(root / folder, dest / folder, ignore=ignore)
    return dest


def pip(*args: str | Path) -> None:
    """pip of the running environment; raises with pip's output when it fails."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", *map(str, args)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"pip {' '.join(map(str, args))} failed:\n{done.stdout}{done.stderr}")


def dependency_paths() -> list[str]:
    """The running environment's site-packages folders (pure and platform-specific)."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def install_tether(workdir: Path) -> Installed:
    """Build a wheel of this checkout, install it into a fresh venv, and give that venv the dev
    environment's third-party packages (see the module docstring)."""
    sources = copy_sources(ROOT, workdir / "src")
    wheels = workdir / "wheels"
    pip("wheel", *PIP_QUIET, "--no-deps", "--no-build-isolation", "--wheel-dir", wheels, sources)
    (wheel,) = wheels.glob("tether-*.whl")
    venv = workdir / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    installed = Installed(venv)
    pip("--python", installed.python, "install", *PIP_QUIET, "--no-deps", wheel)
    site_packages = subprocess.run(
        [installed.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site_packages) / DEPENDENCIES_PTH).write_text("\n".join(dependency_paths()) + "\n")
    return installed
