"""One stored event as server-sent-event bytes: the wire format every events stream writes."""

from __future__ import annotations

import json

from tether.events import Event

# JSON leaves these raw inside strings, but line-splitting clients (str.splitlines, some
# JavaScript parsers) break lines on them: a payload could then forge an `id:` or `event:` line.
UNSAFE_IN_DATA = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def frame(event: Event) -> bytes:
    """``id: <cursor>``, ``event: <type>``, ``data: <compact JSON>``, a blank line."""
    data = json.dumps(event.data, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in UNSAFE_IN_DATA.items():
        if char in data:
            data = data.replace(char, escaped)
    return f"id: {event.cursor}\nevent: {event.type}\ndata: {data}\n\n".encode()
