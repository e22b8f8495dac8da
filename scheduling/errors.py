"""The one family of domain errors. Views and the API map them to HTTP in one place each.

Bad input is Django's `ValidationError` with a dict keyed by field (400); these cover the rest.
"""


class DomainError(Exception):
    """Base of quotaportal's own errors; `message` is shown to the person as it is."""

    status_code = 400

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class NotAllowed(DomainError):
    """The user may see the object but not do this to it (403)."""

    status_code = 403


class NotFound(DomainError):
    """The object does not exist, or the user may not know it does (404)."""

    status_code = 404


class Conflict(DomainError):
    """The object is not in a state that allows this (409), e.g. an illegal job transition."""

    status_code = 409
