"""How a list or a mapping setting arrives from the environment: one rule for every section's
lists, one for its mappings."""

from __future__ import annotations

import json
from typing import Any


def listed(value: Any) -> Any:
    """A list from the environment, as JSON (``["a", "b"]``) or comma-separated (``a, b``);
    anything else (a YAML list, a default) as it is."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


def mapping(value: Any) -> Any:
    """A mapping from the environment, as JSON (``{"ci": "..."}``); anything else (a YAML
    mapping, a default) as it is. Text that is not JSON is refused with the decoder's rule and
    position, so the error names the setting (pydantic-settings' own decoding names only its
    section) and never quotes the value, which may hold a token."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON object: {exc.msg} (column {exc.colno})") from None
    return value
