"""Why an operation did not do what it was asked, in the operator's words: each transport maps the
kind to its own answer (the admin API: an HTTP status and `{"error": message}`; the CLI: the
message and an exit code). A request refused for its content is tempoconf.problems'
InvalidRequestError (every problem with its pointer)."""

from __future__ import annotations

__all__ = [
    "Conflict",
    "Invalid",
    "NotFound",
    "OperationError",
    "Refused",
    "Unavailable",
    "Undelivered",
]


class OperationError(Exception):
    """An operation's refusal or failure; `message` says what and where."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(OperationError):
    """What it acts on does not exist (no running rollout, no active freeze). API: 404."""


class Invalid(OperationError):
    """A parameter beside the request is not one it may name (a start's workflow id). API: 400."""


class Conflict(OperationError):
    """The state is in the way (a running rollout holds the lock, the namespace is frozen
    already). API: 409."""


class Refused(OperationError):
    """The rollout refused the command (its update failed, saying why). API: 409."""


class Unavailable(OperationError):
    """Temporal could not be reached or did not answer. API: 503."""


class Undelivered(OperationError):
    """A command could not be delivered to its workflow (API: 502); `unavailable`, when set, is
    why in Temporal's terms: it did not answer (API: 503 with that message)."""

    def __init__(self, message: str, *, unavailable: str = "") -> None:
        super().__init__(message)
        self.unavailable = unavailable
