"""The API's signing key: it signs the commands a rollout takes only from the API (an `approve`
of a rollout whose plan carries its public key; tempoconf.rollout.signatures).

The key is an Ed25519 private key in a PEM file (PKCS#8, as `openssl genpkey -algorithm ed25519
-out signing.pem` writes it); the access policy names the file (`signing_key`). Whoever reads the
file can approve any rollout that trusts it: keep it as the API's admin tokens are kept.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tempoconf.rollout.signatures import KEY_PREFIX, bound_message, signed_message

__all__ = ["CommandSigner", "SigningKeyError"]


class SigningKeyError(Exception):
    """The signing key file cannot be read, or holds no Ed25519 private key; the message names it."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(
            f"signing key {path}: {problem} (make one with "
            "`openssl genpkey -algorithm ed25519 -out signing.pem`)"
        )
        self.path = path
        self.problem = problem


class CommandSigner:
    """Signs commands with one Ed25519 private key; `public_key` is what a rollout carries.
    `emails`: those the access policy gives the caller it signs for (`for_caller`)."""

    def __init__(self, private_key: Ed25519PrivateKey, emails: Sequence[str] = ()) -> None:
        self._key = private_key
        self.emails: tuple[str, ...] = tuple(emails)
        """The caller's emails, which a bound approval carries and its signature covers."""
        raw = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.public_key = KEY_PREFIX + base64.b64encode(raw).decode("ascii")
        """`ed25519:` and the base64 of the raw public key (a request's `approval_key`)."""

    @classmethod
    def from_pem_file(cls, path: Path | str) -> CommandSigner:
        """The signer of the unencrypted PEM private key in `path`; SigningKeyError, naming the
        file, when it cannot be read or is not an Ed25519 key."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as error:
            raise SigningKeyError(path, f"cannot be read: {error.strerror or error}") from error
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as error:
            # TypeError: an encrypted key (no password given); ValueError: not a PEM key at all.
            raise SigningKeyError(
                path, f"is not an unencrypted PEM private key ({error})"
            ) from error
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningKeyError(
                path, f"holds another kind of key ({type(key).__name__}), not Ed25519"
            )
        return cls(key)

    def for_caller(self, emails: Sequence[str]) -> CommandSigner:
        """This key, signing for a caller with `emails` (tempoconf.access.identity.Principal)."""
        return CommandSigner(self._key, emails)

    @classmethod
    def generate(cls) -> CommandSigner:
        """A signer with a new random key (tests, a stack that keeps no key across restarts)."""
        return cls(Ed25519PrivateKey.generate())

    def sign(
        self, identity: str, workflow_id: str, command: str, digest: str, at: datetime
    ) -> tuple[str, str]:
        """(signature, signed_at): the base64 signature of `signed_message` and the ISO 8601
        time it names (`at`, in UTC)."""
        if at.tzinfo is None:
            raise ValueError("a signing time needs a zone")
        signed_at = at.astimezone(UTC).isoformat()
        message = signed_message(
            identity=identity,
            workflow_id=workflow_id,
            command=command,
            digest=digest,
            signed_at=signed_at,
        )
        return base64.b64encode(self._key.sign(message)).decode("ascii"), signed_at

    def sign_now(
        self, identity: str, workflow_id: str, command: str, digest: str
    ) -> tuple[str, str]:
        """`sign` at the current time."""
        return self.sign(identity, workflow_id, command, digest, datetime.now(UTC))

    def sign_bound(
        self,
        identity: str,
        workflow_id: str,
        command: str,
        digest: str,
        *,
        rollout_run: str,
        stage_index: int,
        at: datetime | None = None,
        nonce: str | None = None,
    ) -> dict[str, str | int | list[str]]:
        """A command's signed fields in the bound form (tempoconf.rollout.signatures.bound_message):
        `signature`, `signed_at`, `nonce` (new and random unless given), `rollout_run`,
        `stage_index` and `emails` (this signer's), to add to the command's argument."""
        when = at if at is not None else datetime.now(UTC)
        if when.tzinfo is None:
            raise ValueError("a signing time needs a zone")
        signed_at = when.astimezone(UTC).isoformat()
        nonce = nonce if nonce is not None else secrets.token_hex(16)
        emails = list(self.emails)
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
        return {
            "signature": base64.b64encode(self._key.sign(message)).decode("ascii"),
            "signed_at": signed_at,
            "nonce": nonce,
            "rollout_run": rollout_run,
            "stage_index": stage_index,
            "emails": emails,
        }
