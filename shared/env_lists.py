"""How a list setting arrives from the environment: one rule for every section's lists."""

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
