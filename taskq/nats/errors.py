"""Translation of nats-py errors into the `TaskqError` tree, at this package's boundary.

A `Guard` belongs to one connection: `with guard:` around any nats-py call turns its errors
into taskq errors. It also remembers the permission violations its server reported, because
the server refuses a publish asynchronously and the request then only times out; a timeout
right after a violation is reported as the PermissionDenied it really is. Requests it watches
(`watch`) end at the violation naming their subject instead of waiting out their timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from taskq.errors import (
    BrokerError,
    NotFound,
    PermissionDenied,
    StorageFull,
    TaskqError,
    TransientError,
)

# JetStream API error codes we react to (nats-server `server/errors.json`)
STREAM_NOT_FOUND = 10059
CONSUMER_NOT_FOUND = 10014
MESSAGE_NOT_FOUND = 10037
STREAM_NAME_IN_USE = 10058
CONSUMER_EXISTS = 10148
WRONG_LAST_SEQUENCE = 10071  # a compare-and-set publish lost the race
MSG_DELETE_FAILED = 10057  # with "no message found": it was deleted already
SEQUENCE_NOT_FOUND = 10043  # a delete of a sequence deleted already
INSUFFICIENT_RESOURCES = 10023  # 503: the server's or account's storage is used up
STORAGE_EXCEEDED = 10047  # a reservation (max_bytes) larger than the storage left
ACCOUNT_EXCEEDED = 10002  # 400 "resource limits exceeded for account": its max_file
ATOMIC_DISABLED = 10174  # an atomic batch sent to a stream made without `allow_atomic`
STORE_FAILED = 10077  # with "maximum bytes exceeded": a stream's max_bytes, discard new
SERVER_STORAGE = "the server's JetStream storage (jetstream max_file_store, or the account's limit)"

T = TypeVar("T")
_TIMEOUTS = (nats.errors.TimeoutError, asyncio.TimeoutError, TimeoutError)
_RECONNECTING = (nats.errors.ConnectionReconnectingError,)


class Guard:
    """Context manager translating NATS errors raised inside it (one per connection).

    A class rather than a generator-based context manager: it wraps every ack and publish,
    and this form costs a fraction of `contextlib.contextmanager`'s set-up per use.
    """

    __slots__ = ("_expected", "_refused", "_violations", "_waiting")

    def __init__(self) -> None:
        self._violations: deque[tuple[float, str]] = deque(maxlen=16)  # (when, text)
        self._expected: set[str] = set()  # subjects probed on purpose (taskq doctor)
        # requests in flight, by quoted lower-case subject (as the server's -ERR names it)
        self._waiting: dict[str, set[asyncio.Future[Any]]] = {}
        self._refused: set[asyncio.Future[Any]] = set()  # ended by a violation, not a cancel

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc is not None:
            self.reraise(exc)

    def reraise(self, exc: BaseException) -> None:
        """Raise the taskq error for `exc`, or return (the caller re-raises it as it is).
        What `with guard:` does, for the hot paths that catch errors themselves so that a
        call that succeeds enters no guard at all."""
        if isinstance(exc, TaskqError) or not isinstance(exc, Exception):
            return
        error = translate(exc, self.recent_violation)
        if error is not None:
            raise error from None

    def violation(self, text: str) -> None:
        """Remember a permissions violation the server reported on this connection, and end
        the watched requests to the subject it names (they would get no reply)."""
        self._violations.append((time.monotonic(), text))
        lowered = text.lower()
        for quoted, waiters in self._waiting.items():
            if quoted in lowered:
                for waiter in waiters:
                    self._refused.add(waiter)
                    waiter.cancel()

    def watch(self, client: Client) -> None:
        """Make `client.request` (which nats-py's JetStream calls use) end with a timeout
        as soon as the server refuses its subject, instead of waiting out its deadline:
        the refused request is then translated to PermissionDenied like any other."""
        original = client.request

        async def request(
            subject: str,
            payload: bytes = b"",
            timeout: float = 0.5,
            old_style: bool = False,
            headers: dict[str, Any] | None = None,
        ) -> Msg:
            return await self.refusable(
                subject, original(subject, payload, timeout, old_style, headers)
            )

        client.request = request  # type: ignore[method-assign]

    async def refusable(self, subject: str, answer: Awaitable[T]) -> T:
        """Await `answer` to a request published to `subject` (by `answer` itself), ended
        with a timeout as soon as the server refuses that subject for permissions."""
        waiter = asyncio.ensure_future(answer)
        quoted = f'"{subject.lower()}"'
        self._waiting.setdefault(quoted, set()).add(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter not in self._refused:
                raise  # the caller was cancelled
            raise nats.errors.TimeoutError from None
        finally:
            self._refused.discard(waiter)
            waiters = self._waiting.get(quoted)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiting[quoted]

    def expect(self, subject: str) -> None:
        """A probe is about to try `subject`: a refusal of it is an answer, not a problem."""
        self._expected.add(subject)

    @contextlib.contextmanager
    def refusal_expected(self, *subjects: str) -> Iterator[None]:
        """Requests to `subjects` the caller turns into its own error when refused (a
        create the user may not make: NotProvisioned): not logged as a problem."""
        self._expected.update(subjects)
        try:
            yield
        finally:
            self._expected.difference_update(subjects)

    def expected(self, text: str) -> bool:
        """Whether a violation's text is about a subject being probed (nats-py hands the
        server's error over in lower case)."""
        return any(f'"{subject.lower()}"' in text.lower() for subject in self._expected)

    def violated(self, subject: str) -> bool:
        """Whether the server refused `subject` (a probe's answer); ends expecting it."""
        self._expected.discard(subject)
        quoted = f'"{subject.lower()}"'
        found = [entry for entry in self._violations if quoted in entry[1].lower()]
        for entry in found:
            self._violations.remove(entry)
        return bool(found)

    def recent_violation(self, within: float = 15.0) -> str | None:
        """The text of a violation seen in the last `within` seconds (consumed once)."""
        now = time.monotonic()
        while self._violations:
            when, text = self._violations.pop()
            if now - when <= within:
                return text
        return None


def translate(exc: Exception, violation: Callable[[], str | None]) -> TaskqError | None:
    """The taskq error for a NATS client exception (None: not a NATS error, let it be)."""
    if isinstance(exc, nats.js.errors.APIError):
        return _api_error(exc)
    if isinstance(exc, _TIMEOUTS):
        refused = violation()
        if refused:
            return PermissionDenied(f"NATS refused it: {refused}", None, 403)
        return TransientError("NATS request timed out")
    if isinstance(exc, nats.errors.Error):
        return _client_error(exc)
    return None


def _api_error(exc: nats.js.errors.APIError) -> TaskqError:
    # some subclasses (KV errors) skip APIError.__init__: read attributes defensively
    text = getattr(exc, "description", None) or str(exc)
    code, err_code = getattr(exc, "code", None), getattr(exc, "err_code", None)
    full = storage_full(text, err_code, code)
    if full is not None:
        return full
    if isinstance(exc, nats.js.errors.NotFoundError):
        return NotFound(getattr(exc, "description", None) or "not found", err_code, code)
    if isinstance(exc, nats.js.errors.ServiceUnavailableError):
        return TransientError(exc.description or "JetStream unavailable", exc.err_code, 503)
    if code == 403 or "permission" in text.lower():
        return PermissionDenied(text, err_code, code)
    return BrokerError(text, err_code, code)


def storage_full(text: str, err_code: int | None, code: int | None) -> StorageFull | None:
    """The StorageFull a server error stands for, or None when it is about something else.

    The server answers a publish into a full store with 503, which nats-py raises as
    "service unavailable" like an election; retried, it would hang the caller for the whole
    retry deadline, so it is told apart here by its code and text."""
    lowered = text.lower()
    if err_code in (INSUFFICIENT_RESOURCES, STORAGE_EXCEEDED) or "insufficient" in lowered:
        return StorageFull(SERVER_STORAGE, text, err_code, code)
    if err_code == ACCOUNT_EXCEEDED or "resource limits exceeded" in lowered:
        return StorageFull(
            "the account's JetStream storage (its jetstream max_file)", text, err_code, code
        )
    if "maximum bytes exceeded" in lowered:
        return StorageFull("the stream's max_bytes", text, err_code, code)
    return None


def _client_error(exc: nats.errors.Error) -> TaskqError:
    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return TransientError("no stream answered the publish (is it being elected?)")
    if isinstance(exc, nats.errors.MaxPayloadError):
        return BrokerError(f"message over the server's max_payload: {exc}")
    if isinstance(exc, nats.errors.NoRespondersError):
        return TransientError("no responders (JetStream not ready?)")
    if isinstance(exc, _RECONNECTING):
        return TransientError(f"NATS connection not ready: {type(exc).__name__}")
    if isinstance(exc, nats.errors.ConnectionClosedError):
        # closed for good (nats-py gave up, or it was closed): retrying cannot help
        return BrokerError("the NATS connection is closed")
    return BrokerError(str(exc) or type(exc).__name__)


def reply_error(reply: dict[str, object], what: str) -> BrokerError | None:
    """The error in a raw JetStream API reply (`{"error": {...}}`), or None."""
    error = reply.get("error")
    if not isinstance(error, dict):
        return None
    code, err_code = error.get("code"), error.get("err_code")
    text = str(error.get("description", f"{what} failed"))
    status = code if isinstance(code, int) else None
    number = err_code if isinstance(err_code, int) else None
    full = storage_full(text, number, status)
    if full is not None:
        return full
    # 503 but not full: "JetStream system temporarily unavailable" (no meta leader yet)
    return (TransientError if status == 503 else BrokerError)(text, number, status)
