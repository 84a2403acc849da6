"""A bad request never hurts another (issue 9), on both stores: a value that cannot be stored
fails its own item of a group commit, and only it."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from tests.fakes import NoQueue, run_to_end
from tests.store.rows import claimed, new
from tether import AgentApp, InvocationContext
from tether.errors import ErrorCode
from tether.outcomes import completed, failed
from tether.pubsub import MemoryPubSub
from tether.queue import Queue
from tether.services import Services
from tether.store import invocations as invocations_module
from tether.store.schema import NewInvocation, Status
from tether.store.store import (
    Accepted,
    AppendRequest,
    Finished,
    FinishRequest,
    NewEvent,
    Store,
    ValueRefused,
)
from tether.worker.runtime import Runtime

HALF_AN_EMOJI = "\ud83d"


def good_and_bad(bad: Sequence[NewInvocation]) -> tuple[list[NewInvocation], set[str]]:
    """40 good requests (five of them with a null input) with the bad ones spread among them."""
    good = [new(input=None if i % 8 == 0 else {"n": i}) for i in range(40)]
    batch = [*good]
    for n, request in enumerate(bad):
        batch.insert(4 * n + 1, request)
    return batch, {request.id for request in bad}


async def accepted_beside_refused(
    store: Store, batch: list[NewInvocation], bad: set[str]
) -> list[ValueRefused]:
    results = await store.accept_many(batch)
    refused = []
    for request, result in zip(batch, results, strict=True):
        if request.id in bad:
            assert isinstance(result, ValueRefused), result
            assert await store.get(request.id) is None  # nothing stored for it
            refused.append(result)
        else:
            assert isinstance(result, Accepted) and result.created, result
    assert await store.count_queued() == 40
    return refused


async def test_forty_good_accepts_beside_ten_bad_ones_are_all_accepted(store: Store) -> None:
    batch, bad = good_and_bad(
        [
            new(input={"text": HALF_AN_EMOJI}),
            new(input="\udfff"),
            new(input=float("nan")),
            new(input=[float("inf")]),
            new(input={"k": "a\x00b"}),
            new(session="s\x00"),
            new(session="s" + HALF_AN_EMOJI),
            new(owner="ann\x00"),
            new(owner="ann" + HALF_AN_EMOJI),
            new(input={"deep": 10**5000}),
        ]
    )
    refused = await accepted_beside_refused(store, batch, bad)
    messages = [r.public_message for r in refused]
    assert (
        messages[0]
        == "input: lone surrogates (\\ud800-\\udfff, half of a character) are not allowed"
    )
    assert [m.split(":")[0] for m in messages] == ["input"] * 5 + ["session_id"] * 2 + [
        "owner"
    ] * 2 + ["input"]


async def test_a_value_only_the_database_refuses_fails_alone_too(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(invocations_module, "storable", lambda new: new)  # a validation gap
    batch, bad = good_and_bad(
        [
            new(input={"text": HALF_AN_EMOJI}),
            new(session="s" + HALF_AN_EMOJI),
            new(input=[float("nan")]),
        ]
        * 3
        + [new(input={"k": "a\x00b"})]
    )
    refused = await accepted_beside_refused(store, batch, bad)
    assert {r.public_message for r in refused} == {
        "the request holds a value the database cannot store"
    }


async def test_a_nul_in_a_batch_is_refused_not_cut_short(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's JSON functions end a string at an escaped NUL: a batch (one JSON parameter
    there) refuses the value, as PostgreSQL refuses it in text, rather than store a prefix."""
    monkeypatch.setattr(invocations_module, "storable", lambda new: new)  # a validation gap
    prefix = str(uuid.uuid4())
    bad = NewInvocation(prefix + "\x00tail", "ann", None, 1, "h")
    good = [new(), new()]
    results = await store.accept_many([good[0], bad, good[1]])
    assert isinstance(results[1], ValueRefused), results
    assert all(isinstance(r, Accepted) for r in (results[0], results[2])), results
    assert await store.get(prefix) is None


async def test_twenty_finishes_beside_an_unstorable_output_land_and_only_it_is_refused(
    store: Store,
) -> None:
    ids = await claimed(store, 21)
    bad = ids[7]
    outputs = {i: {"text": HALF_AN_EMOJI} if i == bad else {"n": i} for i in ids}
    results = await store.finish_many([FinishRequest(i, 1, completed(outputs[i])) for i in ids])
    for invocation_id, result in zip(ids, results, strict=True):
        assert isinstance(result, ValueRefused if invocation_id == bad else Finished), result
    offender = await store.get(bad)
    assert offender is not None and offender.status is Status.ACTIVE  # nothing of it written
    await store.finish(FinishRequest(bad, 1, failed(ErrorCode.INVALID_OUTPUT)))
    for invocation_id in ids:
        done = await store.get(invocation_id)
        assert done is not None and done.attempt == 1
        if invocation_id == bad:
            assert done.error_code == "invalid_output"
        else:
            assert done.status is Status.COMPLETED and done.output == outputs[invocation_id]


async def test_an_unstorable_event_fails_only_its_own_append(store: Store) -> None:
    ids = await claimed(store, 5)
    tick = NewEvent("tick", {"type": "tick"})
    bad = NewEvent("tick", {"type": "tick", "text": HALF_AN_EMOJI})
    requests = [AppendRequest(i, 1, [tick, bad] if n == 2 else [tick]) for n, i in enumerate(ids)]
    results = await store.append_many(requests)
    assert isinstance(results[2], ValueRefused)
    for n, invocation_id in enumerate(ids):
        cursors = [e.cursor for e in await store.events_after(invocation_id, 0)]
        assert cursors == ([1] if n == 2 else [1, 2])


# -- the same through the worker's runtime ---------------------------------------------------


def gated_app(runs: int, calls: Counter[str]) -> AgentApp:
    """Every run waits until all ``runs`` have started, so their outcomes are written in one
    group commit; input ``{"bad": true}`` returns half an emoji."""
    app, release, started = AgentApp(), asyncio.Event(), [0]

    @app.invoke
    async def invoke(input: Any, ctx: InvocationContext) -> Any:
        calls[ctx.invocation_id] += 1
        started[0] += 1
        if started[0] == runs:
            release.set()
        await release.wait()
        return {"text": HALF_AN_EMOJI} if input.get("bad") else {"n": input["n"]}

    return app


@pytest.mark.parametrize("validation", ["validated", "validation gap"])
async def test_twenty_runs_beside_one_with_an_unstorable_output_finish_on_their_first_attempt(
    store: Store, validation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if validation == "validation gap":  # the output reaches the shared write unchecked
        monkeypatch.setattr("tether.worker.runtime.encoded", lambda value: None)  # no text
    batches: list[int] = []
    finish_many = store.finish_many

    async def recorded(requests: Sequence[FinishRequest]) -> Any:
        batches.append(len(requests))
        return await finish_many(requests)

    monkeypatch.setattr(store, "finish_many", recorded)
    calls: Counter[str] = Counter()
    runtime = Runtime(
        services=Services(store, MemoryPubSub(), Queue(NoQueue())),
        app=gated_app(21, calls),
        name="host:1",
        concurrency=50,
        max_event_bytes=1 << 20,
    )
    requests = [new(input={"n": n, "bad": n == 13}) for n in range(21)]
    for request in requests:
        await store.accept(request)
        assert await runtime.start(request.id)
    await run_to_end(runtime, within=20)

    # All in one group commit; with the gap, the store refused the offender alone and the
    # runtime then ended it with invalid_output on its own.
    assert batches == ([21, 1] if validation == "validation gap" else [21])
    for n, request in enumerate(requests):
        done = await store.get(request.id)
        assert done is not None and done.attempt == 1 and calls[request.id] == 1
        if n == 13:
            assert (done.status, done.error_code) == (Status.FAILED, "invalid_output")
        else:
            assert done.status is Status.COMPLETED and done.output == {"n": n}


async def test_an_unstorable_event_ends_only_its_own_run_with_invalid_output(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tether.context.json_bytes", lambda value: 0)  # emit's check has a gap
    batches: list[int] = []
    append_many, appended = store.append_many, asyncio.Event()

    async def recorded(requests: Sequence[AppendRequest]) -> Any:
        batches.append(len(requests))
        try:
            return await append_many(requests)
        finally:
            appended.set()

    monkeypatch.setattr(store, "append_many", recorded)
    app, release, started = AgentApp(), asyncio.Event(), [0]

    @app.invoke
    async def invoke(input: Any, ctx: InvocationContext) -> Any:
        started[0] += 1
        if started[0] == 5:
            release.set()
        await release.wait()
        await ctx.emit({"type": "tick", "text": HALF_AN_EMOJI if input["bad"] else "ok"})
        await appended.wait()  # the events were flushed (or refused) before the run ends
        return {"n": input["n"]}

    runtime = Runtime(
        services=Services(store, MemoryPubSub(), Queue(NoQueue())),
        app=app,
        name="host:1",
        concurrency=10,
        max_event_bytes=1 << 20,
    )
    requests = [new(input={"n": n, "bad": n == 3}) for n in range(5)]
    for request in requests:
        await store.accept(request)
        assert await runtime.start(request.id)
    await run_to_end(runtime, within=20)

    assert batches == [5]  # the five flushes shared one transaction
    for n, request in enumerate(requests):
        done = await store.get(request.id)
        types = [e.type for e in await store.events_after(request.id, 0)]
        assert done is not None and done.attempt == 1
        if n == 3:  # its refused event is dropped, and it ends at once, never run again
            assert (done.status, done.error_code) == (Status.FAILED, "invalid_output")
            assert types == ["run.started", "run.failed"]
        else:
            assert done.status is Status.COMPLETED
            assert types == ["run.started", "tick", "run.completed"]
