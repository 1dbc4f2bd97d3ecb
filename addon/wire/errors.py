"""Typed run failures and how each one ends a RunSSE stream.

    RunError                    ends the run with a Connect error end-stream
    ├── ProtocolError           the client broke the protocol      -> invalid_argument, ERROR_BAD_REQUEST
    ├── ProviderError           the user's LLM provider failed     -> unavailable, ERROR_PROVIDER_ERROR
    ├── ConfigError             the user's config cannot serve it  -> failed_precondition, shown at once
    ├── AckTimeout              a blob SET was not ACKed in time   -> unavailable, ERROR_TIMEOUT
    ├── DeadlineExceeded        the client's own deadline is up    -> deadline_exceeded, ERROR_TIMEOUT
    ├── InternalError           our bug or a store failure         -> internal, ERROR_INTERNAL
    ├── AccessDenied            a client that may not use the user's models -> permission_denied
    ├── BudgetExceeded          a team user's monthly budget is used up -> resource_exhausted
    └── RunCanceled             cancel / newer run / disconnect    -> canceled (no details)
        └── ShuttingDown        the proxy stops                    -> unavailable, retryable

Every RunError is logged with the request id before it is encoded (PROTOCOL part 6.2).
"""

from __future__ import annotations

from byok.proto import aiserver_pb2 as spb

from .connect import Code, ConnectError, ErrorDetail

_E = spb.ErrorDetails


def error_details(
    error: int,
    *,
    title: str,
    detail: str,
    retryable: bool,
    immediate: bool = False,
    expected: bool = False,
) -> ErrorDetail:
    details = spb.ErrorDetails(
        error=error,
        details=spb.CustomErrorDetails(
            title=title,
            detail=detail,
            is_retryable=retryable,
            show_request_id=True,
            should_show_immediate_error=immediate,
        ),
        is_expected=expected,
    )
    return ErrorDetail("aiserver.v1.ErrorDetails", details.SerializeToString())


class RunError(Exception):
    """Base: a failure that ends the run. Subclasses decide the Connect shape."""

    code = Code.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_connect(self) -> ConnectError:
        return ConnectError(self.code, self.message)


class ProtocolError(RunError):
    """The client sent something the protocol does not allow (bad frame, unknown id, wrong oneof)."""

    code = Code.INVALID_ARGUMENT

    def __init__(self, message: str) -> None:
        super().__init__(message if message.startswith("protocol error") else f"protocol error: {message}")

    def to_connect(self) -> ConnectError:
        return ConnectError(
            self.code,
            self.message,
            [error_details(_E.ERROR_BAD_REQUEST, title="Protocol error", detail=self.message, retryable=False)],
        )


class ProviderError(RunError):
    """The provider failed: HTTP error, broken stream, length cut-off, refusal, bad events."""

    code = Code.UNAVAILABLE

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = True,
        title: str = "Server Error",
        immediate: bool = False,
        expected: bool = False,
        kind: str = "provider_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.title = title
        self.immediate = immediate
        self.expected = expected
        self.kind = kind

    @property
    def detail(self) -> str:
        """The message with the provider's HTTP status, as the client, the log and `trace` show it."""
        return self.message if self.status is None else f"{self.message} (HTTP {self.status})"

    def to_connect(self) -> ConnectError:
        detail = self.detail
        error = _E.ERROR_CONVERSATION_TOO_LONG if self.kind == "context_length" else _E.ERROR_PROVIDER_ERROR
        return ConnectError(
            self.code,
            detail,
            [
                error_details(
                    error,
                    title=self.title,
                    detail=detail,
                    retryable=self.retryable,
                    immediate=self.immediate,
                    expected=self.expected,
                )
            ],
        )


class ConfigError(RunError):
    """The user's configuration cannot serve this run (missing key, bad model entry, mode assets)."""

    code = Code.FAILED_PRECONDITION

    def __init__(self, message: str, *, bad_key: bool = False) -> None:
        super().__init__(message)
        self.bad_key = bad_key

    def to_connect(self) -> ConnectError:
        error = _E.ERROR_BAD_USER_API_KEY if self.bad_key else _E.ERROR_CUSTOM_MESSAGE
        return ConnectError(
            self.code,
            self.message,
            [
                error_details(
                    error,
                    title="cursor-byok configuration error",
                    detail=self.message,
                    retryable=False,
                    immediate=True,
                )
            ],
        )


class AckTimeout(RunError):
    code = Code.UNAVAILABLE

    def to_connect(self) -> ConnectError:
        return ConnectError(
            self.code,
            self.message,
            [error_details(_E.ERROR_TIMEOUT, title="Timeout", detail=self.message, retryable=True)],
        )


class DeadlineExceeded(RunError):
    """A one-shot call (addon/assist/) would outlast the client's `connect-timeout-ms`: it ends a little
    before, with an error the client still reads, instead of being cut off mid-call."""

    code = Code.DEADLINE_EXCEEDED

    def to_connect(self) -> ConnectError:
        return ConnectError(
            self.code,
            self.message,
            [error_details(_E.ERROR_TIMEOUT, title="Timeout", detail=self.message, retryable=True)],
        )


class InternalError(RunError):
    code = Code.INTERNAL

    def to_connect(self) -> ConnectError:
        return ConnectError(
            self.code,
            self.message,
            [error_details(_E.ERROR_INTERNAL, title="Internal error", detail=self.message, retryable=True)],
        )


class RunCanceled(RunError):
    """Cancel action, a newer run on the conversation, or the client went away."""

    code = Code.CANCELED


class ShuttingDown(RunCanceled):
    code = Code.UNAVAILABLE

    def __init__(self, message: str = "cursor-byok proxy is shutting down") -> None:
        super().__init__(message)

    def to_connect(self) -> ConnectError:
        return ConnectError(
            self.code,
            self.message,
            [error_details(_E.ERROR_INTERNAL, title="Proxy shutting down", detail=self.message, retryable=True)],
        )


class AlreadyExists(RunError):
    """A request id that already ran (live or finished): Cursor must not get a replay."""

    code = Code.ALREADY_EXISTS


class AccessDenied(RunError):
    """A client that may not use the user's models asked for a run on one (access.py)."""

    code = Code.PERMISSION_DENIED

    def to_connect(self) -> ConnectError:
        return ConnectError(
            self.code,
            self.message,
            [error_details(_E.ERROR_CUSTOM_MESSAGE, title="cursor-byok: not allowed from this client",
                           detail=self.message, retryable=False, immediate=True)],
        )


class BudgetExceeded(RunError):
    """A team user's monthly token or dollar budget is used up (team.py); checked before every
    provider call, so the run ends before it spends more."""

    code = Code.RESOURCE_EXHAUSTED

    def to_connect(self) -> ConnectError:
        return ConnectError(
            self.code,
            self.message,
            [error_details(_E.ERROR_CUSTOM_MESSAGE, title="cursor-byok: monthly budget used up",
                           detail=self.message, retryable=False, immediate=True)],
        )
