"""The admin API's side of signed approvals (tempoconf.rollout.signatures): with a signer
(the access policy's `signing_key`, api/access.py; none: commands are not signed), every rollout the API starts or plans
carries the signer's public key as its `approval_key` (and the starter's emails as its
`started_by_emails`), and every approve it sends carries the signer's signature over the
caller and the emails the policy gives them (tempoconf.operations.steer). The routes call these
in one line each."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from tempoconf.access.signing import CommandSigner
from tempoconf.api.access import AccessControl
from tempoconf.api.auth import caller_of
from tempoconf.api.errors import ApiError

__all__ = ["command_signer", "with_approval_key"]

# What only the API sets in a command: the signature and what it names besides the body's fields.
_SIGNED_FIELDS = ("signature", "signed_at", "rollout_run", "stage_index", "nonce", "emails")


def _signer(request: Request) -> CommandSigner | None:
    access: AccessControl = request.app.state.access
    return access.signer


def with_approval_key(request: Request, raw: Any) -> Any:
    """The rollout request `raw` with the signer's public key as its `approval_key` (as it is
    without a signer), and the verified starter's emails as its `started_by_emails` (a body's
    are replaced: four eyes refuse an approver with one of them). A body naming another key is
    refused (400): a rollout the API starts takes the API's approvals, not those of a key the
    caller chose."""
    signer = _signer(request)
    if signer is None or not isinstance(raw, dict):
        return raw
    caller = caller_of(request)
    if caller is not None and caller.verified:
        # Absent when the caller has none: a worker older than the field refuses it.
        raw = {key: value for key, value in raw.items() if key != "started_by_emails"}
        if caller.emails:
            raw["started_by_emails"] = list(caller.emails)
    named = raw.get("approval_key")
    if named not in (None, "", signer.public_key):
        raise ApiError(
            400,
            f"invalid rollout request: /approval_key: {str(named)[:60]!r} is not this API's "
            f"signing key ({signer.public_key}); leave `approval_key` out: the API sets it",
        )
    return {**raw, "approval_key": signer.public_key}


def command_signer(request: Request, raw: Any, *, what: str) -> CommandSigner | None:
    """The signer an operator command is sent with, for the caller (its emails; None: unsigned).
    A body that brings its own `signature`, `signed_at` or what they name besides (`nonce`,
    `rollout_run`, `stage_index`, `emails`) is refused (400): only the API signs."""
    if isinstance(raw, dict):
        for field in _SIGNED_FIELDS:
            if field in raw:
                raise ApiError(
                    400,
                    f"invalid {what} request: /{field}: the API signs commands itself; leave "
                    f"`{field}` out",
                )
    signer = _signer(request)
    caller = caller_of(request)
    if signer is None or caller is None or not caller.verified:
        return signer
    return signer.for_caller(caller.emails)
