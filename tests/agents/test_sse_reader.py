"""The SSE reader (spec §1.7, cases R1–R16)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tether.agents.errors import StreamLimitExceeded
from tether.agents.sse import SseEvent, read_sse


async def chunks(*parts: str | bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part.encode() if isinstance(part, str) else part


async def collect(
    *parts: str | bytes, max_line_chars: int = 1_048_576, max_buffer_chars: int = 8_388_608
) -> list[SseEvent]:
    reader = read_sse(
        chunks(*parts), max_line_chars=max_line_chars, max_buffer_chars=max_buffer_chars
    )
    return [e async for e in reader]


async def test_an_event_block_parses_event_and_data() -> None:
    events = await collect('event: response.completed\ndata: {"ok":true}\n\n')
    assert events == [SseEvent("response.completed", '{"ok":true}', None)]


async def test_a_block_split_across_chunks_is_one_event() -> None:
    events = await collect("event: x\n", 'data: {"delta":"split"}\n\n')
    assert events == [SseEvent("x", '{"delta":"split"}')]


async def test_comments_heartbeats_and_retry_are_skipped() -> None:
    assert await collect(": heartbeat\n\nretry: 1000\nevent: ping\ndata: hi\n\n") == [
        SseEvent("ping", "hi")
    ]


async def test_id_field_is_kept() -> None:
    [event] = await collect("id: abc-123\nevent: ping\ndata: hi\n\n")
    assert event.id == "abc-123"


async def test_the_default_event_name_is_empty() -> None:
    [event] = await collect("data: 1\n\n")
    assert event.event == ""


async def test_multiple_data_lines_join_with_newline() -> None:
    [event] = await collect("data: line1\ndata: line2\n\n")
    assert event.data == "line1\nline2"


async def test_crlf_line_endings_work_even_split_across_chunks() -> None:
    assert await collect("event: x\r\ndata: y\r\n\r\n") == [SseEvent("x", "y")]
    split = await collect("data: one\r", "\n\r\ndata: two\r\n\r\n")
    assert [e.data for e in split] == ["one", "two"]


async def test_the_trailing_unterminated_block_is_dispatched_at_eof() -> None:
    assert await collect("event: ping\ndata: hi") == [SseEvent("ping", "hi")]


async def test_done_passes_through_as_data() -> None:
    [event] = await collect("data: [DONE]\n\n")
    assert event.data == "[DONE]"


async def test_a_block_without_data_is_dropped() -> None:
    assert await collect("id: only\n\nevent: ping\ndata: hi\n\n") == [SseEvent("ping", "hi")]


async def test_a_multibyte_character_split_across_three_chunks_decodes() -> None:
    raw = "data: ✓\n\n".encode()
    start = raw.index(b"\xe2")
    [event] = await collect(raw[: start + 1], raw[start + 1 : start + 2], raw[start + 2 :])
    assert event.data == "✓"


async def test_a_block_over_max_line_chars_raises() -> None:
    with pytest.raises(StreamLimitExceeded, match="exceeds maxLineChars"):
        await collect("data: " + "x" * 200 + "\n\n", max_line_chars=100)


async def test_an_endless_block_over_max_buffer_chars_raises() -> None:
    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield b"x" * 50

    with pytest.raises(StreamLimitExceeded, match="exceeds maxBufferChars"):
        async for _ in read_sse(endless(), max_buffer_chars=200):
            pass


async def test_only_one_leading_space_is_stripped() -> None:
    [event] = await collect("data:  with-leading-spaces\n\n")
    assert event.data == " with-leading-spaces"


async def test_tabs_are_not_stripped() -> None:
    [event] = await collect("data:\t\tvalue\n\n")
    assert event.data == "\t\tvalue"


async def test_a_colonless_field_line_is_ignored() -> None:
    assert await collect("data\ndata: x\n\n") == [SseEvent("", "x")]


async def test_abort_ends_iteration_and_cancels_a_stalled_upstream_read() -> None:
    cancelled = asyncio.Event()

    async def stalls_after_one() -> AsyncIterator[bytes]:
        yield b"data: first\n\n"
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        yield b""  # pragma: no cover

    signal = asyncio.Event()
    seen = []
    async for event in read_sse(stalls_after_one(), signal=signal):
        seen.append(event.data)
        signal.set()
    assert seen == ["first"]
    assert cancelled.is_set()
