"""Signed approvals: an `approve` that the tempoconf API vouches for, which a Temporal client
cannot forge (docs/contract.md, Signed approvals).

With an access policy on, the API signs each approve it sends with its Ed25519 private key
(tempoconf.access.signing); the rollout carries the public key in its plan (`approval_key`) and
counts an approve only with a valid, fresh signature over what it approves. The signed message
is the canonical JSON (tempoconf.canonical) of `{identity, workflow_id, command, digest,
signed_at}`: a signature is good for one identity, one workflow, one command and one plan, for
`SIGNATURE_MAX_AGE`.

Pure and deterministic (the verification is a function of its inputs; `now` is the workflow's
clock): the workflow's validator and signal handler call it inside the sandbox.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime, timedelta

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tempoconf.canonical import canonical_json

__all__ = [
    "API_ONLY",
    "KEY_PREFIX",
    "MAX_KEY_CHARS",
    "MAX_SIGNATURE_CHARS",
    "MAX_SIGNED_AT_CHARS",
    "SIGNATURE_MAX_AGE",
    "SIGNATURE_MAX_SKEW",
    "approval_key_problem",
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
    """Why this command's signature does not count (None: it is valid and fresh): the signature
    of `public_key`'s private key over `signed_message`, `signed_at` within `SIGNATURE_MAX_AGE`
    before `now` (the workflow's clock) and `SIGNATURE_MAX_SKEW` after it. `path`: the config, in
    the message that says to send it through the API."""
    if not signature and not signed_at:
        return through_api(command, path)
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
        return (
            f"{cannot} the signature is not valid for this "
            f"{'approval' if command == 'approve' else command} (it was made for another "
            "identity, workflow, command or plan digest, or by another key than this rollout's); "
            f"{again}"
        )
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
