"""Before an accept: the app's verdict on the input, and the caller's token when the run needs it.

The app (``AgentApp.check_input``) refuses an input it cannot run (an unknown agent, a
``system`` message, an over-long message) with a reason, so the client gets a 422 at POST time
instead of a queued run that fails. It also says whether the run uses the caller's credentials:
then the gateway keeps ``X-Forwarded-Access-Token`` for it in this process's memory, which only
works where this process also runs it (``tether dev``); see docs/security.md.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tether.app import InputCheck, InputRejected
from tether.credentials import UserCredential
from tether.errors import ErrorCode
from tether.gateway.auth import ACCESS_TOKEN_HEADER, unauthenticated
from tether.gateway.keys import AGENT_APP, AUTH, SERVICES
from tether.gateway.responses import ApiError

NO_USER_AUTH_HERE = (
    "this run uses the caller's credentials, and this server's workers run in other processes, "
    "which the caller's token never reaches: serve it where the gateway runs it (tether dev), "
    "see docs/security.md"
)


def checked_input(request: web.Request, value: Any) -> InputCheck:
    """The app's check of ``value``; a 422 with the app's reason when it cannot run it."""
    try:
        return request.app[AGENT_APP].check_input(value)
    except InputRejected as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, message=str(exc)[:1000]) from None


def caller_credential(request: web.Request, owner: str, check: InputCheck) -> UserCredential | None:
    """The caller's token to hand this run, if it uses one and this process can run it."""
    if check.user_auth == "none":
        return None
    token = request.app[AUTH].access_token(request)
    if token is None:
        if check.user_auth == "required":
            raise unauthenticated(
                f"this agent runs on behalf of the user: {ACCESS_TOKEN_HEADER} is required"
            )
        return None
    if request.app[SERVICES].credentials is None:  # no worker in this process to hand it to
        if check.user_auth == "required":
            raise ApiError(ErrorCode.INVALID_REQUEST, message=NO_USER_AUTH_HERE)
        return None
    return UserCredential(owner, token)
