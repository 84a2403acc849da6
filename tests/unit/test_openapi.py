"""The OpenAPI document is generated from the models the gateway answers with, and the tests'
checker really refuses answers the document does not describe."""

from __future__ import annotations

import json
from typing import Any

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from tests.openapi_check import ContractViolation, OpenApiResponses
from tether.errors import ErrorCode
from tether.gateway.openapi import build_openapi, openapi_text

CHECKER = OpenApiResponses()
ID = "6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"


def headers(content_type: str = "application/json", **extra: str) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict({"Content-Type": content_type, **extra}))


def check(method: str, path: str, status: int, body: Any, **extra: str) -> None:
    CHECKER.check(method, path, status, headers(**extra), json.dumps(body).encode())


def status_document(**fields: Any) -> dict[str, Any]:
    return {
        "id": ID,
        "status": "queued",
        "session_id": None,
        "attempt": 0,
        "created_at": "2024-01-01T00:00:00Z",
        "started_at": None,
        "finished_at": None,
        "last_event_id": 0,
        "tenant": "acme",
        "priority": 0,
        **fields,
    }


def error(code: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": "m"}, "detail": "m"}


def test_the_served_document_is_the_generated_one() -> None:
    assert json.loads(openapi_text()) == build_openapi()


def test_ids_are_uuids_and_cursors_integers() -> None:
    doc = build_openapi()
    request = doc["components"]["schemas"]["InvocationRequest"]["properties"]
    assert request["id"]["format"] == "uuid"
    assert "type" not in request["input"]  # any JSON value, null included
    listing = {
        p["name"]: p["schema"] for p in doc["paths"]["/api/invocations"]["get"]["parameters"]
    }
    assert listing["cursor"]["type"] == "integer" and listing["limit"]["maximum"] == 200
    page = doc["components"]["schemas"]["InvocationPage"]["properties"]["next_cursor"]
    assert {"type": "integer"} in page["anyOf"]


def test_a_limit_that_cannot_be_lifted_is_not_shown_nullable() -> None:
    change = build_openapi()["components"]["schemas"]["LimitsChange"]["properties"]
    for field in ("weight", "budget_period", "on_budget"):
        assert "anyOf" not in change[field] and "default" not in change[field], field
        assert "null is refused" in change[field]["description"]
    assert change["on_budget"]["enum"] == ["fail", "park"]
    assert {"type": "null"} in change["max_active"]["anyOf"]  # null lifts this one


def test_every_refusal_the_gateway_makes_is_described() -> None:
    doc = build_openapi()
    post = doc["paths"]["/api/invocations"]["post"]["responses"]
    assert {"400", "401", "409", "413", "415", "422", "429", "500", "503"} <= set(post)
    responses = doc["components"]["responses"]
    assert "Allow" in responses["MethodNotAllowed"]["headers"]
    assert "Retry-After" in responses["RateLimited"]["headers"]
    for path in doc["paths"].values():
        for operation in path.values():
            assert {"200", "500"} & set(operation["responses"]), operation["summary"]


def test_a_status_document_is_exact_per_status() -> None:
    check("GET", f"/api/invocations/{ID}", 200, status_document())
    check("GET", f"/api/invocations/{ID}", 200, status_document(status="completed", output=None))
    cancelled = status_document(status="cancelled", error=error("cancelled")["error"])
    check("GET", f"/api/invocations/{ID}", 200, cancelled)
    for wrong in (
        status_document(status="completed"),  # no output
        status_document(output=1),  # output before completion
        status_document(status="cancelled", error=error("invocation_failed")["error"]),
        status_document(id="not-a-uuid"),
        status_document(extra=1),
    ):
        with pytest.raises(ContractViolation):
            check("GET", f"/api/invocations/{ID}", 200, wrong)


def test_sync_answers_are_exact() -> None:
    check("POST", "/api/invocations", 200, {"id": ID, "status": "completed", "output": [1]})
    ended = {"id": ID, "status": "cancelled", **error("cancelled")}
    check("POST", "/api/invocations", 409, ended)
    check("POST", "/api/invocations", 409, error("conflict"))
    check("POST", "/api/invocations", 500, {**ended, "status": "failed", **error("worker_lost")})
    with pytest.raises(ContractViolation):
        check("POST", "/api/invocations", 409, {**ended, "status": "failed"})
    with pytest.raises(ContractViolation):
        check("POST", "/api/invocations", 200, {"id": ID, "status": "failed", "output": 1})


def test_the_checker_refuses_undocumented_answers() -> None:
    with pytest.raises(ContractViolation, match="status not documented"):
        check("GET", f"/api/invocations/{ID}", 409, error("conflict"))
    with pytest.raises(ContractViolation, match="Retry-After"):
        check("POST", "/api/invocations", 429, error("rate_limited"))
    check("POST", "/api/invocations", 429, error("rate_limited"), **{"Retry-After": "1"})
    with pytest.raises(ContractViolation, match="body does not match"):
        check("POST", "/api/invocations", 429, error("conflict"), **{"Retry-After": "1"})
    with pytest.raises(ContractViolation, match="405"):
        check("DELETE", "/api/invocations", 404, error("not_found"))
    with pytest.raises(ContractViolation, match="Allow"):
        check("DELETE", "/api/invocations", 405, error("method_not_allowed"))
    check("DELETE", "/api/invocations", 405, error("method_not_allowed"), Allow="GET,POST")
    with pytest.raises(ContractViolation, match="not documented"):
        CHECKER.check("GET", "/healthz", 200, headers("text/html"), b"")


def test_unknown_paths_must_still_answer_errors_in_the_one_shape() -> None:
    check("GET", "/nope", 404, error("not_found"))
    check("GET", "/custom", 200, {"anything": True})  # a custom route's own answer
    with pytest.raises(ContractViolation):
        check("GET", "/nope", 404, {"detail": "Not Found"})


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_error_code_fits_the_error_shape(code: ErrorCode) -> None:
    check("GET", "/nope", 500, error(code.value))
