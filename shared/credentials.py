"""Request-user credentials: the caller's access token, in the memory of one process only.

On Databricks Apps (or behind a trusted proxy) the gateway receives the caller's token in
``X-Forwarded-Access-Token``. It is never written to PostgreSQL, Redis, events, logs or errors:
the gateway puts it in this process's :class:`CredentialVault`, keyed by invocation id, and the
worker node *of the same process* hands it to the handler as ``ctx.request_auth``. A process that
does not hold it (another worker, or this one after a restart) cannot get it from anywhere, which
is why an invocation that was handed a token is flagged (``user_auth``, a boolean, not the token)
and a later attempt without it fails with ``user_auth_recovery_unsupported`` unless the app can
finish without the user (docs/security.md, "Request-user credentials").
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient

Who = Literal["user", "app"]


class UserAuthUnavailable(RuntimeError):
    """``client_for("user")`` where this attempt has no user credential (a replacement attempt
    that runs without the user, or a request that carried none)."""


@dataclass(frozen=True, slots=True)
class UserCredential:
    """The caller and their token. ``repr`` and ``str`` never show the token."""

    user: str
    token: str = field(repr=False)

    def __str__(self) -> str:
        return f"UserCredential(user={self.user!r})"


class CredentialVault:
    """Invocation id → :class:`UserCredential`, for one process; entries older than ``ttl``
    seconds are forgotten (the platform's tokens expire anyway). Thread-safe."""

    def __init__(self, ttl: float = 3600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, UserCredential]] = OrderedDict()
        """Oldest first: a put moves its entry to the end."""
        self._lock = threading.Lock()

    def put(self, invocation_id: str, credential: UserCredential) -> None:
        """Keep (or refresh: a repeated request brings a newer token) the invocation's token,
        and forget the tokens past ``ttl``: one whose invocation ended elsewhere (another
        process cancelled or failed it) is never asked for again, so ``get`` alone would keep
        it for the life of the process. The oldest are first: a put looks at those alone."""
        now = self._clock()
        with self._lock:
            self._entries.pop(invocation_id, None)
            self._entries[invocation_id] = (now, credential)
            while now - next(iter(self._entries.values()))[0] > self._ttl:
                self._entries.popitem(last=False)

    def get(self, invocation_id: str) -> UserCredential | None:
        with self._lock:
            found = self._entries.get(invocation_id)
            if found is None:
                return None
            if self._clock() - found[0] > self._ttl:
                del self._entries[invocation_id]
                return None
            return found[1]

    def discard(self, invocation_id: str) -> None:
        with self._lock:
            self._entries.pop(invocation_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __repr__(self) -> str:
        return f"CredentialVault({len(self)} entries)"


ClientFactory = Callable[[str | None], "WorkspaceClient"]
"""Builds a WorkspaceClient on a user token, or (None) on the app's own credentials."""


def databricks_client(token: str | None) -> WorkspaceClient:
    """databricks-sdk's client: on the caller's token (PAT auth, the host from the app's own
    configuration), or on the app's credential chain (service principal, profile, env)."""
    from databricks.sdk import WorkspaceClient
    from databricks.sdk.config import Config

    if token is None:
        return WorkspaceClient()
    host = Config().host  # the app's host; its credentials are not used for the user's client
    return WorkspaceClient(config=Config(host=host, token=token, auth_type="pat"))


class WorkspaceAuth:
    """``ctx.request_auth``: ``client_for("user")`` on the caller's token, ``client_for("app")``
    on the app's own credentials. Clients are built on first use (building one may do blocking
    I/O: call it off the event loop) and kept for the attempt."""

    def __init__(
        self, credential: UserCredential | None, factory: ClientFactory = databricks_client
    ) -> None:
        self._credential = credential
        self._factory = factory
        self._clients: dict[Who, WorkspaceClient] = {}
        self._lock = threading.Lock()

    @property
    def user(self) -> str | None:
        """The caller the token belongs to; None when this attempt runs without the user."""
        return self._credential.user if self._credential is not None else None

    @property
    def has_user(self) -> bool:
        return self._credential is not None

    def client_for(self, who: str) -> WorkspaceClient:
        if who not in ("user", "app"):
            raise ValueError("client_for takes 'user' or 'app'")
        if who == "user" and self._credential is None:
            raise UserAuthUnavailable("this attempt runs without the user's credentials")
        key: Who = "user" if who == "user" else "app"
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                token = self._credential.token if key == "user" and self._credential else None
                client = self._factory(token)
                self._clients[key] = client
            return client

    def __repr__(self) -> str:
        return f"WorkspaceAuth(user={self.user!r})"
