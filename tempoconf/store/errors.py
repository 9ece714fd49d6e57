"""The store's errors: a rollout lock held by another run or lost, a version never stored."""

from __future__ import annotations

from sqlalchemy.exc import DataError, IntegrityError

from tempoconf.store.records import LockRecord

__all__ = [
    "LockError",
    "LockHeldError",
    "LockLostError",
    "StoreSchemaError",
    "UnknownVersionError",
    "refused_data",
]


def refused_data(error: BaseException) -> bool:
    """The write failed on the data it was given (a value the database refuses, or text that
    cannot even be encoded), not on the store being unreachable or busy: writing the same rows
    again fails again, and the other rows of the batch may be fine."""
    return isinstance(error, DataError | IntegrityError | UnicodeError)


class LockError(RuntimeError):
    """Base of the lock errors."""


class LockHeldError(LockError):
    """The config's rollout lock is held by another workflow run."""

    def __init__(self, holder: LockRecord) -> None:
        self.holder = holder
        super().__init__(
            f"config {holder.namespace}/{holder.path} already has a running rollout: workflow "
            f"{holder.workflow_id!r} (run {holder.run_id}) of version {holder.version}"
        )


class LockLostError(LockHeldError):
    """The run no longer holds the config's lock and nobody does (released, or taken over and then
    released). A LockHeldError, so callers that treat a lost lock as fatal catch both; `holder` is
    None here (only here)."""

    def __init__(self, namespace: str, path: str, run_id: str) -> None:
        self.holder = None  # type: ignore[assignment]
        self.namespace = namespace
        self.path = path
        self.run_id = run_id
        LockError.__init__(
            self,
            f"run {run_id} no longer holds the rollout lock of config {namespace}/{path} (nobody does)",
        )


class UnknownVersionError(LookupError):
    """A version that was never stored for this config."""

    def __init__(self, namespace: str, path: str, version: str) -> None:
        self.namespace = namespace
        self.path = path
        self.version = version
        super().__init__(f"config {namespace}/{path} has no version {version!r}")


class StoreSchemaError(RuntimeError):
    """The store's schema is not the one this version of tempoconf needs: opening a store never
    migrates it (only `tempoconf db upgrade`, `dev` and `demo` do), so this says what to run."""

    def __init__(self, url: str, current: str | None, head: str, *, known: bool) -> None:
        self.url = url
        self.current = current
        self.head = head
        if current is None:
            message = (
                f"store {url} has no tempoconf schema yet (no migration applied), this tempoconf "
                f"needs migration {head}: run `tempoconf db upgrade` first"
            )
        elif known:
            message = (
                f"store {url} is at migration {current}, this tempoconf needs {head}: run "
                "`tempoconf db upgrade` first"
            )
        else:
            message = (
                f"store {url} is at migration {current}, which this tempoconf does not know (it "
                f"needs {head}): a newer tempoconf migrated it; run that version instead, or go "
                f"back to this one with that version's `tempoconf db downgrade {head}` first"
            )
        super().__init__(message)
