"""What every section of the settings (``timers``, ``limits``, ``worker``, ``auth``, ``agents``)
shares with the top level: a key that names no setting is an error, a number is finite (no
``inf``, no ``nan``: each has bounds of its own besides) and no boolean, and an error never echoes
the value it refused (tokens and database passwords are settings)."""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, model_validator
from pydantic_settings import SettingsConfigDict

SETTINGS_RULES = SettingsConfigDict(extra="forbid", allow_inf_nan=False, hide_input_in_errors=True)
"""The rules of every settings model, the top level's included (:class:`tether.settings.Settings`
adds its environment options to them)."""

HOUR = 3600.0
DAY = 24 * HOUR
"""Units of the bounds of the durations, which are all in seconds."""


def no_booleans_for_numbers(model: type[BaseModel], data: Any) -> Any:
    """Refuse a boolean where a setting is a number: YAML reads ``on``, ``off``, ``yes``, ``no``,
    ``true`` and ``false`` as booleans, which pydantic takes as 1 and 0 (``port: on`` served on
    port 1, ``max_queued: off`` would be a cap of 0)."""
    if isinstance(data, dict):
        for name, value in data.items():
            field = model.model_fields.get(name)
            if isinstance(value, bool) and field is not None and _numeric(field.annotation):
                raise ValueError(f"{name} is a number, not {str(value).lower()}")
    return data


def _numeric(annotation: Any) -> bool:
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_numeric(arg) for arg in get_args(annotation))
    return annotation in (int, float)


class SettingsSection(BaseModel):
    """A nested section of the settings."""

    model_config = SETTINGS_RULES

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        return no_booleans_for_numbers(cls, data)
