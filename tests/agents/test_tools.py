"""Function tools: schemas from type hints and pydantic, validation, normalization, timeouts."""

from __future__ import annotations

import asyncio
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from tether.agents import ToolError, schema_tool, tool
from tether.agents.approvals import requires_approval
from tether.agents.dispatch import normalize_result


@tool(effect="write", timeout_s=5)
async def book(city: Annotated[str, Field(description="Where")], nights: int = 1) -> str:
    """Book a hotel.

    More detail that is not part of the description."""
    return f"{city}:{nights}"


class Query(BaseModel):
    sql: str
    limit: int = 10


@tool
def run_query(query: Query) -> dict[str, object]:
    """Run a query."""
    return {"sql": query.sql, "limit": query.limit}


def test_the_schema_comes_from_type_hints() -> None:
    assert book.name == "book" and book.description == "Book a hotel."
    assert book.parameters == {
        "type": "object",
        "additionalProperties": False,
        "required": ["city"],
        "properties": {
            "city": {"type": "string", "description": "Where"},
            "nights": {"type": "integer", "default": 1},
        },
    }
    assert book.annotations is not None and book.annotations.effect == "write"
    assert book.timeout_s == 5


def test_a_single_pydantic_parameter_is_the_schema() -> None:
    assert set(run_query.parameters["properties"]) == {"sql", "limit"}


async def test_arguments_are_validated_before_the_call() -> None:
    assert await book.call({"city": "Oslo", "nights": 2}) == "Oslo:2"
    assert await run_query.call({"sql": "SELECT 1"}) == {"sql": "SELECT 1", "limit": 10}
    with pytest.raises(ToolError, match="Invalid arguments for tool 'book': nights"):
        await book.call({"city": "Oslo", "nights": "many"})
    with pytest.raises(ToolError, match="city"):
        await book.call({})


@pytest.mark.parametrize(("args", "kind"), [([1, 2], "array"), (None, "null"), ("x", "str")])
async def test_non_object_arguments_are_rejected(args: object, kind: str) -> None:
    with pytest.raises(ToolError, match=f"received non-object arguments \\(got {kind}\\)"):
        await book.call(args)


async def test_a_schema_tool_receives_the_argument_object() -> None:
    echo = schema_tool(
        "echo", "Echo", {"type": "object", "required": ["x"]}, lambda args: args["x"]
    )
    assert await echo.call({"x": 3}) == 3
    with pytest.raises(ToolError, match="missing"):
        await echo.call({})


def test_results_are_normalized_and_truncated() -> None:
    assert normalize_result(None, 10) == ""
    assert normalize_result({"a": 1}, 10) == '{"a":1}'
    cut = normalize_result("x" * 60_000, 50_000)
    assert cut.startswith("x" * 50_000)
    assert cut.endswith("[Result truncated: 60000 chars exceeds 50000 limit]")


def test_write_update_and_destructive_effects_need_approval() -> None:
    from tether.agents.types import ToolAnnotations, ToolEffect

    effects: tuple[ToolEffect, ...] = ("write", "update", "destructive")
    for effect in effects:
        assert requires_approval(ToolAnnotations(effect=effect))
    assert requires_approval(ToolAnnotations(destructive=True))
    assert not requires_approval(ToolAnnotations(effect="read"))
    assert not requires_approval(ToolAnnotations())
    assert not requires_approval(None)


def test_an_unknown_effect_is_rejected() -> None:
    with pytest.raises(ValueError, match="effect"):
        tool(name="boom", effect="explode")(lambda: None)  # type: ignore[call-overload]


async def test_a_sync_tool_runs_off_the_event_loop() -> None:
    loop_thread: list[bool] = []

    @tool
    def where() -> str:
        """Where am I."""
        try:
            asyncio.get_running_loop()
            loop_thread.append(True)
        except RuntimeError:
            loop_thread.append(False)
        return "ok"

    assert await where.call({}) == "ok"
    assert loop_thread == [False]
