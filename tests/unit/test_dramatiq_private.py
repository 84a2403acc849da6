"""Canaries for every Dramatiq internal Tether relies on (listed in
``tether.worker.dramatiq_private``). Each fails loudly, saying what to re-check, when an installed
Dramatiq changes under Tether. The last one needs Redis; the others need nothing."""

from __future__ import annotations

import hashlib
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.encoder import JSONEncoder

from tether.worker import dramatiq_private
from tether.worker.dramatiq_private import (
    DISPATCH_SHA256,
    ENQUEUE_ARGV,
    IncompatibleDramatiq,
    RedisMessage,
    check_dispatch_script,
    dispatch_script,
    enqueue_arguments,
    redis_message,
    unsleeping_consumer,
)

RECHECK = (
    f"Dramatiq {dramatiq.__version__} changed an internal Tether relies on: re-check every item "
    "of tether/worker/dramatiq_private.py's docstring against it before moving the pin"
)


def test_dispatch_lua_is_the_script_tether_was_tested_with() -> None:
    found = hashlib.sha256(dispatch_script()).hexdigest()
    assert found == DISPATCH_SHA256, f"{RECHECK} (dispatch.lua's sha256 is now {found})"


def test_the_start_check_refuses_any_other_script() -> None:
    check_dispatch_script(dispatch_script())
    with pytest.raises(IncompatibleDramatiq, match="dispatch.lua"):
        check_dispatch_script(dispatch_script() + b"\n-- changed\n")


def test_the_enqueue_command_reads_its_arguments_in_the_order_tether_sends_them() -> None:
    script = dispatch_script().decode()
    common = [name for name, _ in re.findall(r"local (\w+) = ARGV\[(\d+)\]", script)]
    enqueue = script.split('if command == "enqueue" then', 1)[1].split("elseif", 1)[0]
    own = re.findall(r"local (\w+) = ARGS\[(\d+)\]", enqueue)
    assert "ARGS[i - 8] = ARGV[i]" in script, RECHECK
    assert [*common, *(name for name, _ in own)] == list(ENQUEUE_ARGV), RECHECK


class RecordingBroker(RedisBroker):
    """A RedisBroker whose script calls are recorded instead of sent (no server needed)."""

    calls: list[list[Any]]

    def __init__(self) -> None:
        super().__init__(client=redis.Redis(), namespace=dramatiq_private.NAMESPACE)  # type: ignore[no-untyped-call]
        self.calls = []
        self.scripts["dispatch"] = lambda args, keys: self.calls.append([keys, *args])
        self.scripts["maxstack"] = lambda: 8000


def sent_by_dramatiq(delay: int | None) -> tuple[list[Any], dramatiq.Message[Any]]:
    broker = RecordingBroker()
    broker.declare_queue("q")
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="q", actor_name="run_invocation", args=("an-id",), kwargs={}, options={}
    )
    broker.enqueue(message, delay=delay)
    [call] = broker.calls
    return call, message


def sent_by_tether(delay: float) -> list[Any]:
    message = redis_message("q", "run_invocation", ("an-id",), delay)
    return [[dramatiq_private.NAMESPACE], *enqueue_arguments(message, broker_id="b", now_ms=1)]


def comparable(body: bytes) -> dict[str, Any]:
    """A decoded message without what differs between two enqueues of it (ids, clocks)."""
    fields = dramatiq.Message.decode(body).asdict()
    for varying in ("message_id", "message_timestamp"):
        fields.pop(varying)
    fields["options"] = {**fields["options"], "redis_message_id": "-"}
    if "eta" in fields["options"]:
        fields["options"]["eta"] = "-"
    return fields


@pytest.mark.parametrize("delay_ms", [None, 5000])
def test_tether_enqueues_exactly_what_redis_broker_enqueue_sends(delay_ms: int | None) -> None:
    theirs, _ = sent_by_dramatiq(delay_ms)
    ours = sent_by_tether((delay_ms or 0) / 1000)
    # keys, command, queue, heartbeat timeout, dead-message TTL: the same values
    for position in (0, 1, 3, 5, 6):
        assert ours[position] == theirs[position], f"{RECHECK} (argument {position})"
    # the message id in Redis is the message's redis_message_id option, as Dramatiq does it
    for call in (ours, theirs):
        assert dramatiq.Message.decode(call[10]).options["redis_message_id"] == call[9], RECHECK
    assert comparable(ours[10]) == comparable(theirs[10]), RECHECK
    if delay_ms:
        assert ours[3] == "q.DQ" and "eta" in dramatiq.Message.decode(ours[10]).options


def test_dramatiq_derives_a_larger_unpack_bound_than_tether_passes() -> None:
    broker = RecordingBroker()
    broker.declare_queue("q")
    broker.enqueue(dramatiq.Message(queue_name="q", actor_name="a", args=(), kwargs={}, options={}))
    assert broker.calls[0][8] >= dramatiq_private.MAX_UNPACK, RECHECK


def test_the_message_encoding_is_dramatiqs_compact_json() -> None:
    assert isinstance(dramatiq.get_encoder(), JSONEncoder), RECHECK
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="q",
        actor_name="run_invocation",
        args=("an-id",),
        kwargs={},
        options={"redis_message_id": "r"},
        message_id="m",
        message_timestamp=1,
    )
    expected = (
        b'{"queue_name":"q","actor_name":"run_invocation","args":["an-id"],"kwargs":{},'
        b'"options":{"redis_message_id":"r"},"message_id":"m","message_timestamp":1}'
    )
    assert message.encode() == expected, RECHECK
    assert dramatiq.Message.decode(expected) == message, RECHECK


def test_a_redis_message_carries_its_queue_id_and_body() -> None:
    message = redis_message("q", "run_invocation", ("an-id",), 0)
    assert isinstance(message, RedisMessage) and message.queue == "q"
    decoded = dramatiq.Message.decode(message.body)
    assert decoded.args == ("an-id",) and decoded.options == {"redis_message_id": message.redis_id}


@pytest.fixture
def empty_queue(redis_url: str) -> Iterator[tuple[RedisBroker, str]]:
    broker = RedisBroker(url=redis_url)  # type: ignore[no-untyped-call]
    queue = f"tether-test-{uuid.uuid4().hex[:8]}"
    broker.declare_queue(queue)
    try:
        yield broker, queue
    finally:
        broker.flush(queue)
        broker.close()


def test_dramatiqs_consumer_with_no_idle_timeout_never_sleeps_after_an_empty_fetch(
    empty_queue: tuple[RedisBroker, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, queue = empty_queue
    me, real_sleep, slept = threading.get_ident(), time.sleep, []

    def recording_sleep(seconds: float) -> None:
        if threading.get_ident() == me:
            slept.append(seconds)
        real_sleep(seconds)

    consumer = unsleeping_consumer(broker, queue, prefetch=2)
    monkeypatch.setattr(time, "sleep", recording_sleep)
    try:
        for _ in range(20):  # Dramatiq's back-off grows with every miss
            assert next(consumer) is None, RECHECK
    finally:
        monkeypatch.undo()
        consumer.close()
    assert all(pause <= 0 for pause in slept), f"{RECHECK} (it slept {max(slept)} s)"
