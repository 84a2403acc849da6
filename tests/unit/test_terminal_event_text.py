"""A completed run's terminal event carries the output text the attempt's check encoded:
published as it is, never encoded again, and read back as the same event (its stored row takes
the output from the invocation's row, which stores that text)."""

from __future__ import annotations

import json

import pytest

from tether.errors import ErrorCode
from tether.events import RUN_COMPLETED, Event, decode_batch, encode_batch
from tether.jsonvalue import InvalidJson, JsonText, encoded, object_text
from tether.outcomes import cancelled, completed, failed


def test_object_text_writes_json_text_in_as_it_is_and_encodes_the_rest() -> None:
    text = object_text({"type": "t", "output": encoded({"b": [1, None]}), "n": 1.5})
    assert isinstance(text, JsonText)
    assert text == '{"type":"t","output":{"b":[1,null]},"n":1.5}'
    assert object_text({}) == "{}"
    assert json.loads(object_text({"s": "a JsonText is no string value"})) == {
        "s": "a JsonText is no string value"
    }
    with pytest.raises(InvalidJson):
        object_text({"bad": float("nan")})


@pytest.mark.parametrize("output", [None, 0, "text \u00e9", [1, {"k": None}], {"deep": {"x": []}}])
def test_a_completed_outcome_with_its_text_has_the_terminal_event_as_text(output: object) -> None:
    outcome = completed(output, encoded(output))
    assert outcome.event_text is not None
    assert (
        json.loads(outcome.event_text)
        == outcome.event_data
        == {
            "type": RUN_COMPLETED,
            "output": output,
        }
    )


def test_only_a_checked_output_gives_the_terminal_event_a_text() -> None:
    assert completed({"k": 1}).event_text is None
    assert failed(ErrorCode.INVOCATION_FAILED).event_text is None
    assert cancelled().event_text is None


def test_a_batch_publishes_an_events_text_as_it_is() -> None:
    """The text wins over the value: it is what the invocation's row holds (the check's
    encoding), where the value is the handler's object, which it may have changed since."""
    stored = JsonText('{"type":"run.completed","output":{"v":1}}')
    batch = [
        Event(1, "run.started", {"attempt": 1}),
        Event(2, "run.completed", {"type": "run.completed", "output": {"v": 2}}, stored),
    ]
    message = encode_batch(batch)
    assert json.loads(message) == [
        [1, "run.started", {"attempt": 1}],
        [2, "run.completed", {"type": "run.completed", "output": {"v": 1}}],
    ]
    assert [(e.cursor, e.type, e.data) for e in decode_batch(message)] == [
        (1, "run.started", {"attempt": 1}),
        (2, "run.completed", {"type": "run.completed", "output": {"v": 1}}),
    ]
    plain = [Event(1, "x", None)]
    assert encode_batch(plain) == '[[1,"x",null]]'
