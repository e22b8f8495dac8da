"""The errors botocore models for `batch` (ClientException 400, ServerException 500) and AWS's front-door
codes (AccessDeniedException, UnrecognizedClientException, InvalidSignatureException ...), in one family."""

from __future__ import annotations


class AwsError(Exception):
    code = "ClientException"
    status = 400

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status


class ClientError(AwsError):
    """ClientException: bad input, an unknown or invisible object, a state that forbids the request."""


def invalid(path: str, message: str) -> ClientError:
    """A ClientException naming the AWS member at fault (`capacityLimits[0].maxCapacity: ...`)."""
    return ClientError(f"{path}: {message}" if path else message)


class AccessDenied(AwsError):
    code = "AccessDeniedException"
    status = 403


class TooManyRequests(AwsError):
    code = "TooManyRequestsException"
    status = 429
