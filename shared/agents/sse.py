"""Reading upstream streams: abort and deadline guards, the SSE block reader and a line reader.

The SSE reader matches the reference (spec §1.7), including its deviations from WHATWG: lone
``\\r`` line endings are not supported, field lines without a colon are ignored, the trailing
unterminated block is dispatched at EOF, and the default event name is ``""``. Caps count Python
characters (code points), not UTF-16 code units.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeVar

from tether.agents.errors import StreamLimitExceeded, StreamTimeout

MAX_LINE_CHARS = 1_048_576
MAX_BUFFER_CHARS = 8_388_608

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str
    data: str
    id: str | None = None


async def _next_item(iterator: AsyncIterator[T]) -> T:
    return await anext(iterator)


async def guarded(
    source: AsyncIterable[T],
    signal: asyncio.Event | None = None,
    deadline: float | None = None,
) -> AsyncGenerator[T, None]:
    """Items from ``source`` until it ends, ``signal`` is set (silently) or ``deadline`` passes.

    An abort or a deadline cancels the pending upstream read at once, so an idle upstream never
    holds the consumer. ``deadline`` is a ``loop.time()`` value; passing it raises StreamTimeout.
    """
    iterator = aiter(source)
    try:
        if signal is None and deadline is None:
            async for item in iterator:
                yield item
            return
        async for item in _race(iterator, signal or asyncio.Event(), deadline):
            yield item
    finally:
        await _close(iterator)


async def _close(iterator: AsyncIterator[Any]) -> None:
    """Close the upstream now (an HTTP response, a session) rather than at garbage collection."""
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


async def _race(
    iterator: AsyncIterator[T], signal: asyncio.Event, deadline: float | None
) -> AsyncGenerator[T, None]:
    loop = asyncio.get_running_loop()
    waiter = asyncio.ensure_future(signal.wait())
    pending: asyncio.Future[T] | None = None
    try:
        while not waiter.done():
            pending = asyncio.ensure_future(_next_item(iterator))
            timeout = None if deadline is None else max(0.0, deadline - loop.time())
            done, _ = await asyncio.wait(
                {pending, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if pending not in done:
                if waiter.done():
                    return
                raise StreamTimeout("stream deadline passed")
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        waiter.cancel()
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending


def _field_value(line: str, name: str) -> str | None:
    """The value of ``name:`` on this line with exactly one leading space stripped."""
    if not line.startswith(name + ":"):
        return None
    value = line[len(name) + 1 :]
    return value[1:] if value.startswith(" ") else value


def parse_block(block: str) -> SseEvent | None:
    """One SSE block (lines without the blank separator); None when it carries no data line."""
    event, event_id, data = "", None, []
    for line in block.split("\n"):
        if not line or line.startswith(":") or ":" not in line:
            continue
        if (value := _field_value(line, "data")) is not None:
            data.append(value)
        elif (value := _field_value(line, "event")) is not None:
            event = value
        elif (value := _field_value(line, "id")) is not None:
            event_id = value
    if not data:
        return None
    return SseEvent(event=event, data="\n".join(data), id=event_id)


def _check_block(block: str, max_line_chars: int) -> None:
    if len(block) > max_line_chars:
        raise StreamLimitExceeded(f"SSE block exceeds maxLineChars ({max_line_chars})")


async def read_sse(
    chunks: AsyncIterable[bytes],
    *,
    max_line_chars: int = MAX_LINE_CHARS,
    max_buffer_chars: int = MAX_BUFFER_CHARS,
    signal: asyncio.Event | None = None,
    deadline: float | None = None,
) -> AsyncGenerator[SseEvent, None]:
    """Parse a byte stream into SSE events; raises StreamLimitExceeded past a cap.

    Setting ``signal`` ends the iteration quietly and cancels the pending upstream read.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buffer = ""
    async with contextlib.aclosing(guarded(chunks, signal, deadline)) as guarded_chunks:
        async for chunk in guarded_chunks:
            buffer += decoder.decode(chunk)
            if "\r" in buffer:
                buffer = buffer.replace("\r\n", "\n")
            *blocks, buffer = buffer.split("\n\n")
            for block in blocks:
                _check_block(block, max_line_chars)
                if (parsed := parse_block(block)) is not None:
                    yield parsed
            if len(buffer) > max_buffer_chars:
                raise StreamLimitExceeded(f"SSE buffer exceeds maxBufferChars ({max_buffer_chars})")
    if signal is not None and signal.is_set():
        return
    buffer = (buffer + decoder.decode(b"", final=True)).replace("\r\n", "\n")
    _check_block(buffer, max_line_chars)
    if (parsed := parse_block(buffer)) is not None:
        yield parsed


async def read_lines(
    chunks: AsyncIterable[bytes], *, max_line_chars: int = MAX_LINE_CHARS
) -> AsyncGenerator[str, None]:
    """Split a byte stream on ``\\n`` (chat-completions parsing, spec §2.3), with a line cap."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buffer = ""
    async for chunk in chunks:  # the caller owns (and closes) ``chunks``
        buffer += decoder.decode(chunk)
        *lines, buffer = buffer.split("\n")
        for line in lines:
            if len(line) > max_line_chars:
                raise StreamLimitExceeded(f"SSE line exceeds {max_line_chars} chars")
            yield line
        if len(buffer) > max_line_chars:
            raise StreamLimitExceeded(f"SSE line buffer exceeds {max_line_chars} chars")
    buffer += decoder.decode(b"", final=True)
    if buffer:
        if len(buffer) > max_line_chars:
            raise StreamLimitExceeded(f"SSE line exceeds {max_line_chars} chars")
        yield buffer
