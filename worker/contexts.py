"""The context each attempt's handler gets: the caller's credentials where this process holds
them, the session's thread, what earlier attempts recorded (to replay), limits and usage."""

from __future__ import annotations

from tether.app import AgentApp
from tether.budgets import StoreMeter
from tether.context import InvocationContext
from tether.credentials import WorkspaceAuth
from tether.services import Services
from tether.store.journal import Recorded
from tether.store.schema import Claim
from tether.thread import SessionThread
from tether.worker.running import RunningAttempt


class AttemptContexts:
    """Builds handler contexts for one runtime."""

    def __init__(
        self,
        services: Services,
        app: AgentApp,
        *,
        max_event_bytes: int,
        inline_sleep_max: float,
        thread_keep: int,
    ) -> None:
        self.services = services
        self.store = services.store
        self.app = app
        self._max_event_bytes = max_event_bytes
        self._inline_sleep_max = inline_sleep_max
        self._thread_keep = thread_keep

    def _request_auth(self, claim: Claim) -> WorkspaceAuth | None | bool:
        """The caller's credentials where this process holds them; ``None`` for an invocation
        that never had any; ``False`` when it had them, they are not here (another process, or
        lost with a dead one), and the app cannot go on without the user."""
        vault = self.services.credentials
        credential = vault.get(claim.invocation_id) if vault is not None else None
        if credential is not None:
            return WorkspaceAuth(credential)
        if not claim.user_auth:
            return None
        try:
            resumable = self.app.check_input(claim.input).resumes_without_user
        except Exception:  # an input it no longer accepts: it cannot vouch for it either
            resumable = False
        return WorkspaceAuth(None) if resumable else False

    async def build(self, running: RunningAttempt) -> InvocationContext | None:
        """The handler's context; a resumed or replacement attempt first reads what earlier
        attempts recorded, to replay it. None: the run needs the user's token and it is not in
        this process."""
        claim = running.claim
        found = self._request_auth(claim)
        if found is False:
            return None
        request_auth = found if isinstance(found, WorkspaceAuth) else None
        thread = None
        if claim.session_id is not None:
            thread = SessionThread(
                self.store.threads,
                claim.owner,
                claim.session_id,
                claim.invocation_id,
                self._thread_keep,
            )
        recorded = Recorded()
        if claim.resumed_by is not None:
            recorded = await self.store.journal.load(claim.invocation_id)
        return InvocationContext(
            invocation_id=claim.invocation_id,
            session_id=claim.session_id,
            attempt=claim.attempt,
            sink=running.writer,
            max_event_bytes=self._max_event_bytes,
            is_recovery=claim.is_recovery,
            recorded=recorded,
            inline_sleep_max=self._inline_sleep_max,
            budget=running.limits,
            request_auth=request_auth,
            thread=thread,
            tenant=claim.tenant,
            usage=StoreMeter(self.store.usage, claim.invocation_id, claim.tenant),
        )
