"""Usage as each model API reports it, read into :class:`tether.ModelUsage`.

Chat completions (OpenAI-compatible APIs, Databricks Model Serving and the AI Gateway) report
``usage: {prompt_tokens, completion_tokens, total_tokens}`` in a non-streamed answer and, when
``stream_options.include_usage`` is asked for, in the stream's last chunk (some endpoints repeat
it in every chunk: the last one wins). The Responses API (the Supervisor API) reports
``usage: {input_tokens, output_tokens, total_tokens}`` in ``response.completed``. A report
without its two parts but with ``total_tokens`` counts the total as output. A count that is not a
number from 0 to :data:`MAX_REPORTED_TOKENS` is no count: the store could not hold it (a bogus
``1e30`` failed the run after the model had answered).
"""

from __future__ import annotations

from typing import Any

from tether import ModelUsage

CHAT_KEYS = ("prompt_tokens", "completion_tokens")
RESPONSES_KEYS = ("input_tokens", "output_tokens")
MAX_REPORTED_TOKENS = 1_000_000_000
"""The most tokens one model call may report in one count: far above any model's context window,
far below what the store's 64-bit sums hold."""


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    if value != value or value > MAX_REPORTED_TOKENS:  # NaN, infinity, bogus
        return None
    return int(value)


def _usage(report: Any, keys: tuple[str, str]) -> ModelUsage | None:
    if not isinstance(report, dict):
        return None
    given, taken = (_count(report.get(k)) for k in keys)
    total = _count(report.get("total_tokens"))
    if given is None and taken is None:
        return None if total is None else ModelUsage(0, total)
    return ModelUsage(given or 0, taken or 0)


def chat_usage(payload: Any) -> ModelUsage | None:
    """The ``usage`` of a chat-completions answer or chunk, or None when it has none."""
    return _usage(payload.get("usage"), CHAT_KEYS) if isinstance(payload, dict) else None


def responses_usage(response: Any) -> ModelUsage | None:
    """The ``usage`` of a Responses API ``response`` object, or None when it has none."""
    return _usage(response.get("usage"), RESPONSES_KEYS) if isinstance(response, dict) else None
