"""What every section of the settings (``timers``, ``limits``, ``worker``, ``auth``, ``agents``)
shares with the top level: a key that names no setting is an error, a number is finite (no
``inf``, no ``nan``: each has bounds of its own besides), and an error never echoes the value it
refused (tokens and database passwords are settings)."""

from __future__ import annotations

from pydantic import BaseModel
from pydantic_settings import SettingsConfigDict

SETTINGS_RULES = SettingsConfigDict(extra="forbid", allow_inf_nan=False, hide_input_in_errors=True)
"""The rules of every settings model, the top level's included (:class:`tether.settings.Settings`
adds its environment options to them)."""

HOUR = 3600.0
DAY = 24 * HOUR
"""Units of the bounds of the durations, which are all in seconds."""


class SettingsSection(BaseModel):
    """A nested section of the settings."""

    model_config = SETTINGS_RULES
