"""Stable error codes and redaction: upstream text never reaches a client or a log verbatim."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("tether.agents")

# Model transport and upstream failures (spec §1.6), shared by every adapter.
TRANSPORT = "transport"
UPSTREAM_FAILED = "upstream_failed"
UPSTREAM_TOOL = "upstream_tool"
UPSTREAM_UNKNOWN = "upstream_unknown"
HTTP_STATUS = "http_status"
LIMIT = "limit_exceeded"
MODEL_ERROR_CODES = frozenset(
    {TRANSPORT, UPSTREAM_FAILED, UPSTREAM_TOOL, UPSTREAM_UNKNOWN, HTTP_STATUS, LIMIT}
)


class AgentError(Exception):
    """Base of the runtime's errors; ``str(err)`` is safe to show to a client."""


class DefinitionError(AgentError, ValueError):
    """An agent definition, a Markdown file or a tool is invalid."""


MAX_DEFINITION_BYTES = 1_000_000
"""The largest agent, skill or bundled file (:data:`tether.agents.skills.resource.MAX_FILE_BYTES`):
its text goes to the model whole."""


def read_definition(path: Path, what: str) -> str:
    """A definition file's text (UTF-8); a file that cannot be read, or is larger than
    :data:`MAX_DEFINITION_BYTES`, is a :class:`DefinitionError` naming it and why (``what``:
    "agent file", "skill file")."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_DEFINITION_BYTES + 1)
        if len(data) > MAX_DEFINITION_BYTES:
            raise DefinitionError(f"Cannot read {what} {path}: over {MAX_DEFINITION_BYTES:,} bytes")
        return data.decode("utf-8-sig")  # a leading byte order mark is dropped
    except (OSError, UnicodeDecodeError) as exc:
        raise DefinitionError(f"Cannot read {what} {path}: {type(exc).__name__}") from None


class ModelError(AgentError):
    """A model call failed. The message is a fixed, client-safe ``<Adapter> error (<code>)``."""

    def __init__(self, adapter: str, code: str, *, status: int | None = None) -> None:
        self.adapter = adapter
        self.code = code
        self.status = status
        detail = str(status) if status is not None else code
        super().__init__(f"{adapter} error ({detail})")


class ToolError(AgentError):
    """Raise from a tool when the message is meant for the model and the client to read."""


class LimitExceeded(AgentError):
    """A run-wide limit (the tool-call budget) is spent; the whole run stops."""


class StreamLimitExceeded(AgentError):
    """An upstream stream broke a size cap (line, buffer, text or tool arguments)."""


class StreamTimeout(AgentError):
    """An upstream stream ran past its total deadline."""


_SECRETS = [
    re.compile(r"(?i)((?:proxy-)?authorization\s*[:=]\s*)(\S+(?:\s+\S+)?)"),
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"),
    re.compile(
        r"(?i)\b((?:access_?token|api_?key|token|secret|password|client_secret)\s*[=:]\s*)\S+"
    ),
    re.compile(r"\bdapi[0-9a-f]{16,}\b"),
]
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def redact(text: str, limit: int = 80) -> str:
    """A one-line, secret-free summary of upstream text, cut to ``limit`` chars plus ``…``."""
    out = text
    for pattern in _SECRETS:
        out = pattern.sub(lambda m: (m.group(1) if m.lastindex else "") + "[redacted]", out)
    out = " ".join(_CONTROL.sub(" ", out).split())
    return out if len(out) <= limit else out[:limit] + "…"


def summarize(detail: Any) -> str:
    """The log summary of an upstream error payload: ``<type|code|reason>: <message>`` (§1.6)."""
    if detail is None:
        return "<none>"
    if isinstance(detail, str):
        return redact(detail)
    if isinstance(detail, dict):
        kind = next((str(detail[k]) for k in ("type", "code", "reason") if detail.get(k)), "object")
        message = detail.get("message") or detail.get("detail") or ""
        return f"{redact(kind, 40)}: {redact(str(message))}"
    return redact(type(detail).__name__)


def log_upstream(adapter: str, code: str, detail: Any) -> None:
    """Warn with a redacted one-line summary; a longer redacted form only at debug level."""
    log.warning("%s error (%s): %s", adapter, code, summarize(detail))
    log.debug("%s error payload: %s", adapter, redact(repr(detail), 2000))
