"""Code tools for the example agents. Markdown agents name them in ``tools:`` by tool name.

Every ``@tool`` at module level is offered under its function name (or ``name=``); a module may
instead define ``TOOLS = {"key": tool}`` to choose the keys.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tether.agents import tool

FORECASTS = {"paris": "sunny, 24 °C", "london": "light rain, 16 °C", "oslo": "snow, -3 °C"}


@tool(effect="read")
def get_weather(city: Annotated[str, Field(description="City name, e.g. Paris")]) -> dict[str, str]:
    """Today's forecast for a city."""
    return {"city": city, "forecast": FORECASTS.get(city.lower(), "no forecast available")}


@tool(effect="read")
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(effect="destructive")
def cancel_booking(
    booking_id: Annotated[str, Field(description="Booking id, e.g. BK-1042")],
) -> str:
    """Cancel a trip booking. Destructive: the run waits for a human to approve each call."""
    return f"Booking {booking_id} cancelled."  # a demo: nothing is really booked or cancelled
