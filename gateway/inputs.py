"""``POST /api/invocations/{id}/input``: resolve what a parked invocation waits for.

Only the owner may answer (anyone else gets 404, as for every route). The same value again is
200 and changes nothing; a different value for a wait already resolved (or timed out) is 409; an
unknown wait is 404; a wait the invocation is not parked on is 409. On success the invocation is
queued again at once and its next attempt replays up to the wait and goes on with the value.
"""

from __future__ import annotations

from aiohttp import web

from tether.errors import ErrorCode
from tether.gateway.keys import SERVICES
from tether.gateway.models import InputRequest
from tether.gateway.parsing import read_json, validated
from tether.gateway.responses import ApiError, json_response
from tether.gateway.routes import (
    INVOCATION,
    canonical_input,
    owned_invocation,
    status_document,
)
from tether.store.journal import InputAnswer

routes = web.RouteTableDef()

ANSWERS: dict[InputAnswer, tuple[ErrorCode, str] | None] = {
    InputAnswer.RESUMED: None,
    InputAnswer.ALREADY: None,
    InputAnswer.UNKNOWN: (ErrorCode.NOT_FOUND, "the invocation has no such wait"),
    InputAnswer.CONFLICT: (ErrorCode.CONFLICT, "the wait was already resolved otherwise"),
    InputAnswer.TIMED_OUT: (ErrorCode.CONFLICT, "the wait timed out"),
    InputAnswer.NOT_WAITING: (ErrorCode.CONFLICT, "the invocation is not waiting for it"),
}


@routes.post(f"{INVOCATION}/input")
async def post_input(request: web.Request) -> web.Response:
    invocation = await owned_invocation(request)  # who asks, before reading what they send
    answer = validated(InputRequest, await read_json(request))  # read_json refuses what no
    # column can hold (NaN, NUL, lone surrogates, nesting past the limit), but infinity
    canonical_input(answer.value, "value")
    services = request.app[SERVICES]
    result = await services.store.journal.resolve_input(invocation.id, answer.wait, answer.value)
    refused = ANSWERS[result]
    if refused is not None:
        code, message = refused
        raise ApiError(code, message=message)
    if result is InputAnswer.RESUMED:
        await services.queue.send([invocation.id])
    current = await services.store.get(invocation.id)
    return json_response(await status_document(request, current or invocation))
