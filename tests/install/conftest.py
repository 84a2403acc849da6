"""The install tier: Tether installed non-editably into a fresh venv, run outside the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.install.installed import Installed, install_tether


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Built and installed once per session (a few seconds, nothing downloaded)."""
    return install_tether(tmp_path_factory.mktemp("install"))


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory that is not the checkout and holds nothing of it."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder
