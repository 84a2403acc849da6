"""A bounded fuzz of the HTTP API, generated from ``/openapi.json`` by schemathesis, in both modes.

Valid and invalid requests (a fixed number, derandomized: the same ones on every run) go to a
real server; any 5xx, an undocumented status, media type or missing header, or a body the
document does not describe fails the test with a curl command that reproduces it.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tether.gateway.openapi import build_openapi

EXAMPLES_PER_API_OPERATION = 30
"""Valid and invalid requests per ``/api`` operation and mode: 5 x 30 + 4 x 2, about 15 s a mode."""
EXAMPLES_PER_SERVICE_OPERATION = 2
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
OWNER = {"X-Forwarded-User": "fuzzer@example.com"}


def harmless(case: Any) -> None:
    """The contract app acts on keys of its input (sleep, wait_cancel, block_sleep, ...): wrap a
    generated input so no fuzzed run can hang a worker. The body stays valid for the schema."""
    body = case.body
    if isinstance(body, dict) and "input" in body:
        body["input"] = {"fuzzed": body["input"]}


def test_fuzzed_requests_get_no_5xx_and_only_documented_answers(server: str) -> None:
    document = build_openapi()
    schema = schemathesis.openapi.from_dict(document)
    for path, methods in document["paths"].items():
        for method in methods:
            examples = (
                EXAMPLES_PER_API_OPERATION
                if path.startswith("/api/")
                else EXAMPLES_PER_SERVICE_OPERATION
            )
            fuzz(schema[path][method.upper()], server, examples)


def fuzz(operation: Any, server: str, examples: int) -> None:
    """``examples`` requests to one operation, each checked; the same ones on every run."""
    requests = st.one_of(
        operation.as_strategy(schemathesis.GenerationMode.POSITIVE),
        operation.as_strategy(schemathesis.GenerationMode.NEGATIVE),
    )

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=requests)
    def run(case: Any) -> None:
        harmless(case)
        case.call_and_validate(base_url=server, headers=OWNER, checks=CHECKS, timeout=30)

    run()
