"""The YAML settings file (``--config FILE``, ``TETHER_CONFIG``): read as a mapping of settings.

Its errors name the file and where in it, never its text: the line that does not parse may hold
a token or a database password.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONFIG_ENV = "TETHER_CONFIG"


class SettingsFileError(ValueError):
    """The settings file cannot be read as settings. The message names the file and the line
    and column (or the fault), never what the file holds."""


def read_settings_file(path: str) -> dict[str, Any]:
    """The settings in the YAML file at ``path`` ({} for an empty file)."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise SettingsFileError(f"{path}: cannot read the settings file ({reason})") from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SettingsFileError(f"{path}: not valid YAML ({_where(exc)})") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise SettingsFileError(
            f"{path}: the settings file must hold a mapping of setting names to values, "
            f"not {_kind(loaded)}"
        )
    for key in loaded:  # pydantic takes them as keywords: another kind of key is a TypeError
        if not isinstance(key, str):
            raise SettingsFileError(f"{path}: every setting name must be text, not {_kind(key)}")
    return loaded


def _where(error: yaml.YAMLError) -> str:
    """Where the file stops being YAML, counted from 1: line and column, or the character of a
    byte sequence that is no text. Never the problem's own words, which may quote the file."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}"
    if isinstance(error, yaml.reader.ReaderError):
        return f"not UTF-8 or UTF-16 text at byte {error.position + 1}"
    return type(error).__name__


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return f"a single value ({type(value).__name__})"
