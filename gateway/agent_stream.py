"""The Responses event stream of an agent run (``/api/agents/chat``), from its durable events.

It is the invocation's own event stream (replayed from the store, then tailed), with every event
passed through the app's translator (``AgentApp.agents.translator``): so it survives a worker's
death and a client's reconnect like any stream. The translator is stateful, so a reconnect
replays the run from its first event and writes only what follows ``Last-Event-ID``; of the
frames one event yields, only the last carries ``id: <cursor>``, so a client that reconnects
with that id had all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from tether.agent_surface import EventTranslator
from tether.errors import MESSAGES, ErrorCode
from tether.events import RUN_CANCELLED, RUN_COMPLETED, RUN_FAILED, RUN_WAITING, Event
from tether.gateway.frames import UNSAFE_IN_DATA
from tether.gateway.sse import serve_stream
from tether.jsonvalue import dumps
from tether.store.schema import Invocation


def translate(translator: EventTranslator, event: Event) -> list[dict[str, Any]]:
    """What one stored event becomes on the Responses wire (``run.*`` events end it: a cancel
    with nothing more; ``run.waiting`` shows the approvals the run is now parked on)."""
    if event.type == RUN_COMPLETED:
        return translator.finalize()
    if event.type == RUN_FAILED:
        error = event.data.get("error") if isinstance(event.data, Mapping) else None
        message = error.get("message") if isinstance(error, Mapping) else None
        return translator.fail(str(message or MESSAGES[ErrorCode.INVOCATION_FAILED]))
    if event.type == RUN_CANCELLED:
        return []  # the user's abort: the stream ends silently (spec §4.8), no error frame
    if event.type == RUN_WAITING and isinstance(event.data, Mapping):
        return translator.translate({**event.data, "type": RUN_WAITING})
    if event.type.startswith("run.") or not isinstance(event.data, Mapping):
        return []
    return translator.translate(dict(event.data))


def frames(items: list[dict[str, Any]], cursor: int | None) -> bytes:
    out = []
    for n, item in enumerate(items):
        data = dumps(item)
        for char, escaped in UNSAFE_IN_DATA.items():
            data = data.replace(char, escaped)
        last = n == len(items) - 1 and cursor is not None
        out.append(
            f"{f'id: {cursor}' + chr(10) if last else ''}event: {item['type']}\ndata: {data}\n\n"
        )
    return "".join(out).encode()


class TranslatedFrames:
    """``EventStream.encode`` for a translated stream that resumes after ``after``."""

    def __init__(self, translator: EventTranslator, after: int) -> None:
        self._translator = translator
        self._after = after

    def __call__(self, event: Event) -> bytes:
        items = translate(self._translator, event)
        if event.cursor <= self._after or not items:
            return b""
        return frames(items, event.cursor)


async def serve_translated(
    request: web.Request,
    translator: EventTranslator,
    invocation: Invocation,
    thread_id: str,
    after: int,
) -> web.StreamResponse:
    """The stream of ``invocation`` (the caller created or checked it), opened by
    ``appkit.metadata {threadId, streamId}`` (the stream id is the invocation id:
    ``/api/agents/approve`` and ``/cancel`` take it)."""
    meta = translator.translate(
        {"type": "metadata", "data": {"threadId": thread_id, "streamId": invocation.id}}
    )
    preamble = frames(meta, None) if after == 0 else b""
    encode = TranslatedFrames(translator, after)
    return await serve_stream(request, invocation.id, 0, encode, preamble, seq=invocation.seq)
