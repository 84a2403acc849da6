"""The ``TETHER_*`` environment: read as it is (validated once, merged with the settings file,
by :func:`tether.settings.load_settings`), and refused where a variable has the shape of a
nested setting (``TETHER_<SECTION>__<NAME>``) but names no section.

A variable of a known section that names no setting in it (``TETHER_TIMERS__STALE_AFTR``) is
refused by the section itself, as the same key in the file is. A ``TETHER_`` variable without
``__`` that names no setting is not read here: the prefix is shared with variables that are no
settings (``TETHER_CONFIG``, ``TETHER_EVENT_LOOP``, ``TETHER_AGENTS_DIR``, an app's own). One
spelled almost like a setting (``TETHER_PROT``) is logged as a likely typo, once per process.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable
from typing import Any

from pydantic_settings import BaseSettings, EnvSettingsSource

ENV_PREFIX = "TETHER_"
ENV_DELIMITER = "__"
OTHER_VARIABLES = frozenset(
    {"TETHER_CONFIG", "TETHER_EVENT_LOOP", "TETHER_AGENTS_DIR", "TETHER_MIGRATIONS_DIR"}
)
"""The project's ``TETHER_`` variables that are no settings (each module's own constant; a test
holds this set to them)."""

log = logging.getLogger(__name__)
_warned: set[str] = set()
"""The likely typos already logged: a process loads its settings more than once."""


class UnknownVariable(ValueError):
    """A ``TETHER_<SECTION>__<NAME>`` variable whose section is no section of the settings."""


def environment_values(
    settings_class: type[BaseSettings], sections: Iterable[str]
) -> dict[str, Any]:
    """The settings this process's environment gives, nested and not yet validated."""
    known = set(sections)
    for name in os.environ:
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        if ENV_DELIMITER not in upper[len(ENV_PREFIX) :]:
            _warn_if_misspelt(upper, settings_class, known)
            continue
        section = upper[len(ENV_PREFIX) :].split(ENV_DELIMITER, 1)[0].lower()
        if section not in known:
            raise UnknownVariable(
                f"settings: {name}: no such setting ({ENV_PREFIX}<SECTION>{ENV_DELIMITER}<NAME> "
                f"names a setting of one of the sections {', '.join(sorted(known))})"
            )
    return dict(EnvSettingsSource(settings_class)())


def _warn_if_misspelt(upper: str, settings_class: type[BaseSettings], sections: set[str]) -> None:
    names = [ENV_PREFIX + f.upper() for f in settings_class.model_fields if f not in sections]
    if upper in names or upper in OTHER_VARIABLES or upper in _warned:
        return
    close = difflib.get_close_matches(upper, [*names, *OTHER_VARIABLES], n=1, cutoff=0.85)
    if close:
        _warned.add(upper)
        log.warning("settings: %s is no setting and is ignored; did you mean %s?", upper, close[0])
