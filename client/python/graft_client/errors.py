"""Exceptions of the Graft client, one per gRPC status code the service documents.

Every exception is a GraftError whose ``code`` is a ``grpc.StatusCode`` and ``details`` the
server's (or the client's) message. Errors found by the client before or after a call (a bad
argument, an external-data location that leaves the model's folder, a short download) carry the
code the server would have used, so callers handle both the same way.
"""

import grpc


class GraftError(Exception):
    """A failed Graft call; ``code`` is the grpc.StatusCode, ``details`` the message."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, details, code=None):
        super().__init__(details)
        self.details = details
        if code is not None:
            self.code = code

    def __str__(self):
        return f"{self.code.name}: {self.details}"


class InvalidArgumentError(GraftError, ValueError):
    """INVALID_ARGUMENT: a bad configuration (unknown pass or option, bad value) or model."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class InvalidModelError(InvalidArgumentError):
    """INVALID_ARGUMENT about the model itself: its bytes are not a valid ONNX model."""


class ExternalDataError(InvalidArgumentError):
    """INVALID_ARGUMENT about an external-data location: not a relative, normalised path inside
    the model's folder, or a symbolic link or a non-regular file there."""


class NotFoundError(GraftError):
    code = grpc.StatusCode.NOT_FOUND


class FailedPreconditionError(GraftError):
    """FAILED_PRECONDITION, e.g. verification asked of a server that has it turned off."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhaustedError(GraftError):
    """RESOURCE_EXHAUSTED: the queue is full, the model exceeds the server's size limit, or the
    server's memory for uploads in progress is full. Retrying later may succeed."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnavailableError(GraftError):
    """UNAVAILABLE: the server cannot be reached (or is shutting down)."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(GraftError, TimeoutError):
    """DEADLINE_EXCEEDED: the request ran out of time (upload included)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class CancelledError(GraftError):
    code = grpc.StatusCode.CANCELLED


class UnauthenticatedError(GraftError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDeniedError(GraftError):
    code = grpc.StatusCode.PERMISSION_DENIED


class UnimplementedError(GraftError):
    code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(GraftError):
    """INTERNAL: a bug in the server; please report it."""

    code = grpc.StatusCode.INTERNAL


class DataLossError(GraftError):
    """DATA_LOSS: the server's answer is incomplete or inconsistent (e.g. fewer model bytes than
    its report announces)."""

    code = grpc.StatusCode.DATA_LOSS


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        FailedPreconditionError,
        ResourceExhaustedError,
        UnavailableError,
        DeadlineExceededError,
        CancelledError,
        UnauthenticatedError,
        PermissionDeniedError,
        UnimplementedError,
        InternalError,
        DataLossError,
    )
}

_TLS_HINTS = (
    (False, "Socket closed",
     "the server closed the connection; if it serves TLS, connect with TLS (and its CA)"),
    (True, "wrong version number", "the server does not speak TLS on this port: connect without TLS"),
    (True, "certificate verify failed",
     "the server's certificate is not signed by the given CA (without one: the system's trusted "
     "CAs), or it has expired"),
    (True, "Peer name",
     "connect with the name the certificate carries, or give it as TlsConfig(server_name=...)"),
    (True, "Socket closed",
     "the server closed the connection after the TLS handshake: it may require a client "
     "certificate (TlsConfig(cert=..., key=...)) signed by a CA it trusts"),
)


def error_for(code, details):
    """The GraftError subclass instance for a grpc.StatusCode and message."""
    cls = _BY_CODE.get(code, GraftError)
    if cls is InvalidArgumentError:
        if "invalid external data location" in details:
            cls = ExternalDataError
        elif "invalid model" in details:
            cls = InvalidModelError
    return cls(details, code)


def from_rpc_error(error, tls=None):
    """A grpc.RpcError as a GraftError; `tls` (whether the channel speaks TLS) adds a hint to
    connection failures, as the C++ client does."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = (error.details() if hasattr(error, "details") else None) or str(error)
    if code == grpc.StatusCode.UNAVAILABLE and tls is not None:
        for needs_tls, text, hint in _TLS_HINTS:
            if needs_tls == tls and text in details:
                details = f"{details} ({hint})"
                break
    return error_for(code, details)
