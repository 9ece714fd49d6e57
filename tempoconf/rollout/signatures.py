"""Signed approvals: an `approve` that the tempoconf API vouches for, which a Temporal client
cannot forge (docs/contract.md, Signed approvals).

With an access policy on, the API signs each approve it sends with its Ed25519 private key
(tempoconf.access.signing); the rollout carries the public key in its plan (`approval_key`) and
counts an approve only with a valid, fresh signature over what it approves. The signed message
is the canonical JSON (tempoconf.canonical) of `{identity, emails, workflow_id, rollout_run,
stage_index, command, digest, nonce, signed_at}` (`bound_message`): a signature is good for one
identity (and the emails the API vouches for), one run of one workflow, one stage, one command
and one plan, once (the rollout keeps the nonces it took), for `SIGNATURE_MAX_AGE`. A run started
before patch `approvals-bound-to-run-and-stage` takes the older form, `{identity, workflow_id,
command, digest, signed_at}` (`signed_message`), as it always did: its status names no
`approval_run`, and the API signs what it shows.

Pure and deterministic (the verification is a function of its inputs; `now` is the workflow's
clock): the workflow's validator and signal handler call it inside the sandbox.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Container
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tempoconf.canonical import canonical_json

__all__ = [
    "take_nonce",
    "API_ONLY",
    "KEY_PREFIX",
    "MAX_EMAILS",
    "MAX_EMAIL_CHARS",
    "MAX_KEY_CHARS",
    "MAX_NONCE_CHARS",
    "MAX_RUN_CHARS",
    "MAX_SIGNATURE_CHARS",
    "MAX_SIGNED_AT_CHARS",
    "SIGNATURE_MAX_AGE",
    "SIGNATURE_MAX_SKEW",
    "Binding",
    "approval_key_problem",
    "bound_message",
    "bound_signature_problem",
    "through_api",
    "signature_problem",
    "signed_message",
]

KEY_PREFIX = "ed25519:"
_KEY_BYTES = 32
_SIGNATURE_BYTES = 64
MAX_KEY_CHARS = 100
"""`ed25519:` and 44 base64 characters; a bound for the request's field."""
MAX_SIGNATURE_CHARS = 200
"""88 base64 characters; a bound for the command's field."""
MAX_SIGNED_AT_CHARS = 64
MAX_NONCE_CHARS = 64
"""The API's nonces are 32 hex characters; a bound for the command's field."""
MAX_RUN_CHARS = 100
"""A Temporal run id (a UUID); a bound for the command's field."""
MAX_EMAILS = 20
MAX_EMAIL_CHARS = 254
SIGNATURE_MAX_AGE = timedelta(minutes=10)
"""How long a signature counts after `signed_at`: an approval is sent at once, so a captured one
cannot be replayed later (within the window, it could only repeat the approval it is)."""
SIGNATURE_MAX_SKEW = timedelta(minutes=2)
"""How far in the future of the workflow's clock `signed_at` may be: the API's and the worker's
clocks differ a little."""
API_ONLY = "only through the tempoconf API"
"""What every refusal of a command without a signature says (the CLI looks for it)."""


def through_api(command: str = "approve", path: str = "PATH") -> str:
    """The refusal of `command` without a signature, for config `path`."""
    what = "approvals" if command == "approve" else f"`{command}`"
    return (
        f"cannot {command}: this rollout takes {what} {API_ONLY} (its access policy signs "
        f"them); {command} with `tempoconf rollout {command} {path}` or "
        f"POST /v1/admin/rollouts/{path}:{command}"
    )


def signed_message(
    *, identity: str, workflow_id: str, command: str, digest: str, signed_at: str
) -> bytes:
    """The bytes a signature covers: canonical JSON of the five fields, UTF-8."""
    document = {
        "identity": identity,
        "workflow_id": workflow_id,
        "command": command,
        "digest": digest,
        "signed_at": signed_at,
    }
    return canonical_json(document).encode("utf-8")


def bound_message(
    *,
    identity: str,
    emails: list[str],
    workflow_id: str,
    rollout_run: str,
    stage_index: int,
    command: str,
    digest: str,
    nonce: str,
    signed_at: str,
) -> bytes:
    """The bytes a bound signature covers: canonical JSON of its nine fields, UTF-8. Its keys
    differ from `signed_message`'s, so no signature of one form verifies as the other."""
    document = {
        "identity": identity,
        "emails": list(emails),
        "workflow_id": workflow_id,
        "rollout_run": rollout_run,
        "stage_index": stage_index,
        "command": command,
        "digest": digest,
        "nonce": nonce,
        "signed_at": signed_at,
    }
    return canonical_json(document).encode("utf-8")


@dataclass(frozen=True)
class Binding:
    """What a bound signature must name to count: the rollout's run (its first run's id, the
    same across continue-as-new), the stage awaiting approval, and a nonce not taken before."""

    rollout_run: str
    stage_index: int
    stage: str
    """The stage as people read it (`stage 2/3 50%`), for the messages."""
    used_nonces: Container[str]


def _decode(text: str, *, size: int) -> bytes | None:
    """Standard base64 of exactly `size` bytes, else None."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    return raw if len(raw) == size else None


def approval_key_problem(key: str) -> str | None:
    """Why `key` is not an approval key (None: it is one): `ed25519:` and the base64 of a raw
    32-byte Ed25519 public key, as `CommandSigner.public_key` gives it."""
    raw = _decode(key[len(KEY_PREFIX) :], size=_KEY_BYTES) if key.startswith(KEY_PREFIX) else None
    if raw is None:
        return (
            f"{key[:60]!r} is not an approval key: `{KEY_PREFIX}` and the base64 of a raw "
            f"{_KEY_BYTES}-byte Ed25519 public key (the API sets it from its signing key)"
        )
    try:
        Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        return f"{key[:60]!r} is not an Ed25519 public key"
    return None


def _parse_time(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    # A time without a zone cannot be compared with the workflow's: it is no time at all here.
    return parsed if parsed.tzinfo is not None else None


def _freshness_problem(
    cannot: str, again: str, at: datetime, signed_at: str, now: datetime
) -> str | None:
    if at < now - SIGNATURE_MAX_AGE:
        return (
            f"{cannot} the signature is stale (signed at {signed_at}, more than "
            f"{int(SIGNATURE_MAX_AGE.total_seconds() // 60)} minutes before {now.isoformat()}); "
            f"{again} again"
        )
    if at > now + SIGNATURE_MAX_SKEW:
        return (
            f"{cannot} the signature is dated in the future (signed at {signed_at}, more "
            f"than {int(SIGNATURE_MAX_SKEW.total_seconds() // 60)} minutes after "
            f"{now.isoformat()}): the API's clock is ahead of the worker's"
        )
    return None


def _checked(
    public_key: str, signature: str, signed_at: str, command: str
) -> tuple[Ed25519PublicKey, bytes, datetime] | str:
    """The key, the raw signature and the time, or why the command's signature cannot be
    checked at all."""
    cannot = f"cannot {command}:"
    again = f"{command} through the tempoconf API"
    if approval_key_problem(public_key) is not None:
        # Validated with the request: only a plan altered some other way gets here.
        return f"{cannot} the rollout's approval key is not an Ed25519 key; no signature counts"
    key = Ed25519PublicKey.from_public_bytes(
        base64.b64decode(public_key[len(KEY_PREFIX) :], validate=True)
    )
    raw = _decode(signature, size=_SIGNATURE_BYTES)
    if raw is None:
        return (
            f"{cannot} the signature is not the base64 of a 64-byte Ed25519 signature "
            f"({again}, which signs it)"
        )
    at = _parse_time(signed_at)
    if at is None:
        return (
            f"{cannot} signed_at {signed_at[:60]!r} is not an ISO 8601 time with a zone "
            f"({again}, which signs it)"
        )
    return key, raw, at


def _not_valid(command: str, what: str) -> str:
    return (
        f"cannot {command}: the signature is not valid for this "
        f"{'approval' if command == 'approve' else command} (it was made for another "
        f"{what}, or by another key than this rollout's); {command} through the tempoconf API"
    )


def signature_problem(
    public_key: str,
    *,
    signature: str,
    signed_at: str,
    identity: str,
    workflow_id: str,
    command: str,
    digest: str,
    now: datetime,
    path: str = "PATH",
) -> str | None:
    """Why this command's signature, in the form of the runs before
    `approvals-bound-to-run-and-stage`, does not count (None: it is valid and fresh): the
    signature of `public_key`'s private key over `signed_message`, `signed_at` within
    `SIGNATURE_MAX_AGE` before `now` (the workflow's clock) and `SIGNATURE_MAX_SKEW` after it.
    `path`: the config, in the message that says to send it through the API."""
    if not signature and not signed_at:
        return through_api(command, path)
    checked = _checked(public_key, signature, signed_at, command)
    if isinstance(checked, str):
        return checked
    key, raw, at = checked
    message = signed_message(
        identity=identity,
        workflow_id=workflow_id,
        command=command,
        digest=digest,
        signed_at=signed_at,
    )
    try:
        key.verify(raw, message)
    except InvalidSignature:
        return _not_valid(command, "identity, workflow, command or plan digest")
    return _freshness_problem(
        f"cannot {command}:", f"{command} through the tempoconf API", at, signed_at, now
    )


def bound_signature_problem(
    public_key: str,
    *,
    signature: str,
    signed_at: str,
    identity: str,
    emails: list[str],
    workflow_id: str,
    command: str,
    digest: str,
    nonce: str,
    rollout_run: str,
    stage_index: int | None,
    binding: Binding,
    now: datetime,
    path: str = "PATH",
) -> str | None:
    """Why this command's bound signature does not count (None: it counts): as
    `signature_problem`, over `bound_message` of what the command names (its `rollout_run`,
    `stage_index`, `nonce`), which must then be `binding`'s run and stage and a nonce it has not
    taken: a signed approval counts on the run and for the stage it was given for, once."""
    if not signature and not signed_at:
        return through_api(command, path)
    cannot = f"cannot {command}:"
    again = f"{command} through the tempoconf API"
    checked = _checked(public_key, signature, signed_at, command)
    if isinstance(checked, str):
        return checked
    key, raw, at = checked
    if not rollout_run or not nonce or stage_index is None:
        return (
            f"{cannot} the signature does not name this rollout's run, its stage and a nonce, "
            "which this rollout requires (an API older than its worker signed it, or it was "
            f"taken from another rollout's history); {again}, of the same version as the worker"
        )
    message = bound_message(
        identity=identity,
        emails=emails,
        workflow_id=workflow_id,
        rollout_run=rollout_run,
        stage_index=stage_index,
        command=command,
        digest=digest,
        nonce=nonce,
        signed_at=signed_at,
    )
    try:
        key.verify(raw, message)
    except InvalidSignature:
        return _not_valid(command, "identity, emails, workflow, run, stage, command or plan digest")
    if rollout_run != binding.rollout_run:
        return (
            f"{cannot} this signed approval was given for another run of workflow "
            f"{workflow_id!r} (run {rollout_run[:40]}), not for this one (run "
            f"{binding.rollout_run}): an approval counts only on the run it was given for; {again}"
        )
    if stage_index != binding.stage_index:
        return (
            f"{cannot} this signed approval was given for stage {stage_index + 1}, and the "
            f"rollout is at {binding.stage}: an approval counts only for the stage it was given "
            f"for; {again}"
        )
    stale = _freshness_problem(cannot, again, at, signed_at, now)
    if stale is not None:
        return stale
    if nonce in binding.used_nonces:
        return (
            f"{cannot} this signed approval (nonce {nonce[:40]}) was taken already: each counts "
            f"once; {again} again"
        )
    return None


def take_nonce(nonces: dict[str, str], nonce: str, signed_at: str, *, now: datetime) -> None:
    """A bound signature counted: its nonce is taken (`nonces`: nonce → signed_at, the run's).
    Nonces whose signatures are no longer fresh are forgotten (such a signature is refused as
    stale), so the set stays as small as the approvals of the last SIGNATURE_MAX_AGE."""
    if not nonce:
        return
    oldest = now - SIGNATURE_MAX_AGE - SIGNATURE_MAX_SKEW
    for taken, taken_at in list(nonces.items()):
        try:
            expired = datetime.fromisoformat(taken_at) < oldest
        except ValueError:
            expired = True
        if expired:
            del nonces[taken]
    nonces[nonce] = signed_at
