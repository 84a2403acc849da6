"""Every answer a test receives, checked against the OpenAPI document the gateway serves.

:func:`open_session` gives an ``aiohttp.ClientSession`` whose trace hook checks each response as
it arrives: its status is documented for the operation, its media type is documented for that
status, its required headers are there, and a JSON body validates against the schema (JSON
Schema 2020-12, formats checked). The contract suite's client uses it, so no test has to
remember to.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import aiohttp
from jsonschema import Draft202012Validator
from multidict import CIMultiDictProxy

from tether.gateway.openapi import build_openapi

Json = dict[str, Any]


class ContractViolation(AssertionError):
    """An answer the OpenAPI document does not describe."""


@dataclass
class OpenApiResponses:
    """Looks answers up in an OpenAPI document and validates them."""

    document: Json = field(default_factory=build_openapi)
    _validators: dict[str, Draft202012Validator] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._paths = [
            (re.compile("^" + re.sub(r"\{[^/]+\}", "[^/]+", path) + "$"), path)
            for path in self.document["paths"]
        ]

    def check(
        self, method: str, path: str, status: int, headers: CIMultiDictProxy[str], body: bytes
    ) -> None:
        where = f"{method} {path} -> {status}"
        spec = self.response_spec(method, path, status, where)
        if spec is None:
            return
        for name, header in spec.get("headers", {}).items():
            if header.get("required") and name not in headers:
                raise ContractViolation(f"{where}: header {name} is missing")
        media_type = headers.get("Content-Type", "").split(";")[0].strip()
        content = spec.get("content", {})
        if media_type not in content:
            raise ContractViolation(f"{where}: {media_type or 'no body'} is not documented")
        if media_type == "application/json":
            self.validate(content[media_type]["schema"], json.loads(body), where)

    def response_spec(self, method: str, path: str, status: int, where: str) -> Json | None:
        """The documented answer, or None for one the document does not cover (a custom route's
        success). Raises for an answer it should cover but does not."""
        template = next((t for pattern, t in self._paths if pattern.match(path)), None)
        responses = self.document["components"]["responses"]
        if template is None:  # custom routes and unknown paths: only errors are Tether's
            return self.error_spec() if status >= 400 else None
        operation = self.document["paths"][template].get(method.lower())
        if operation is None:
            if status != 405:
                raise ContractViolation(f"{where}: an undocumented method must get 405")
            spec: Json = responses["MethodNotAllowed"]
            return spec
        documented = operation["responses"].get(str(status))
        if documented is None:
            raise ContractViolation(f"{where}: status not documented")
        if "$ref" in documented:
            documented = responses[documented["$ref"].rsplit("/", 1)[1]]
        return dict(documented)

    def error_spec(self) -> Json:
        ref = {"$ref": "#/components/schemas/ErrorResponse"}
        return {"content": {"application/json": {"schema": ref}}}

    def validate(self, schema: Json, body: Any, where: str) -> None:
        key = json.dumps(schema, sort_keys=True)
        validator = self._validators.get(key)
        if validator is None:
            root = {**schema, "components": self.document["components"]}
            validator = Draft202012Validator(
                root, format_checker=Draft202012Validator.FORMAT_CHECKER
            )
            self._validators[key] = validator
        errors = sorted(validator.iter_errors(body), key=lambda e: list(e.path))
        if errors:
            details = "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:3])
            raise ContractViolation(f"{where}: body does not match the document: {details}")


RESPONSES = OpenApiResponses()


async def _check_response(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: aiohttp.TraceRequestEndParams
) -> None:
    response = params.response
    body = await response.read() if response.content_type == "application/json" else b""
    RESPONSES.check(params.method, params.url.path, response.status, response.headers, body)


def checked_trace() -> aiohttp.TraceConfig:
    """A trace config that checks every answer against the OpenAPI document."""
    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(_check_response)
    return trace


def open_session(**kwargs: Any) -> aiohttp.ClientSession:
    """An ``aiohttp.ClientSession`` that checks every answer it receives."""
    return aiohttp.ClientSession(trace_configs=[checked_trace()], **kwargs)
