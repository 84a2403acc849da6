"""What ``tether`` says about settings it cannot use: one line a problem, naming the setting and
the rule it breaks, never the value (tokens and database passwords are settings)."""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_core import ErrorDetails


def settings_problems(error: ValidationError) -> list[str]:
    """One line for each problem: the setting's dotted name, then the rule."""
    what = "settings" if error.title == "Settings" else error.title
    return [
        ": ".join([what, *_name(problem), _rule(problem)])
        for problem in error.errors(include_url=False, include_input=False, include_context=False)
    ]


def _name(problem: ErrorDetails) -> list[str]:
    """The setting's dotted name; none for a rule between settings (its text names them)."""
    dotted = ".".join(str(part) for part in problem["loc"])
    return [dotted] if dotted else []


def _rule(problem: ErrorDetails) -> str:
    if problem["type"] == "extra_forbidden":
        return "no such setting"
    return problem["msg"].removeprefix("Value error, ")
