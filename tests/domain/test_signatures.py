"""Signed approvals, pure (tempoconf.rollout.signatures, tempoconf.access.signing): a signature
counts for its identity, workflow, command and digest only, with the rollout's key, while fresh;
everything else is refused with a message that says which; the signing key file is checked."""

from __future__ import annotations

import base64
import subprocess
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tempoconf.access.signing import CommandSigner, SigningKeyError
from tempoconf.canonical import canonical_json
from tempoconf.problems import InvalidRequestError
from tempoconf.rollout.commands import COMMANDS, CommandName, OperatorCommand
from tempoconf.rollout.plan import plan_from_request
from tempoconf.rollout.progress import RolloutProgress, RolloutState
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.rollout.run_state import RolloutRunState
from tempoconf.rollout.signatures import (
    SIGNATURE_MAX_AGE,
    SIGNATURE_MAX_SKEW,
    approval_key_problem,
    signature_problem,
    signed_message,
)

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
SIGNER = CommandSigner(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
OTHER = CommandSigner(Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33))))
DIGEST = "sha256:" + "0123456789abcdef" * 2
SIGNED = {"identity": "bob", "workflow_id": "rollout:default/a/b", "command": "approve"}


def problem(
    key: str = SIGNER.public_key,
    *,
    signed_by: CommandSigner = SIGNER,
    at: datetime = NOW,
    now: datetime = NOW,
    **judged: Any,
) -> str | None:
    """Sign `SIGNED` (with DIGEST) at `at`, then judge it as `judged` overrides say it came."""
    signature, signed_at = signed_by.sign(
        SIGNED["identity"], SIGNED["workflow_id"], SIGNED["command"], DIGEST, at
    )
    fields = {**SIGNED, "digest": DIGEST, "signature": signature, "signed_at": signed_at}
    fields.update(judged)
    return signature_problem(key, now=now, path="a/b", **fields)


def test_a_valid_fresh_signature_counts() -> None:
    assert problem() is None
    assert problem(at=NOW - SIGNATURE_MAX_AGE + timedelta(seconds=1)) is None
    assert problem(at=NOW + SIGNATURE_MAX_SKEW - timedelta(seconds=1)) is None


def test_the_public_key_and_the_signed_message_are_as_documented() -> None:
    raw = SIGNER._key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    assert SIGNER.public_key == "ed25519:" + base64.b64encode(raw).decode()
    assert SIGNER.public_key == "ed25519:A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg="
    message = signed_message(
        identity="bob", workflow_id="w", command="approve", digest=DIGEST, signed_at="t"
    )
    assert message == canonical_json(
        {"identity": "bob", "workflow_id": "w", "command": "approve", "digest": DIGEST,
         "signed_at": "t"}
    ).encode()  # fmt: skip
    signature, signed_at = SIGNER.sign("bob", "w", "approve", DIGEST, NOW)
    assert signed_at == "2026-12-04T12:00:00+00:00"
    # verifiable with nothing but the public key and the documented message
    SIGNER._key.public_key().verify(
        base64.b64decode(signature),
        signed_message(
            identity="bob", workflow_id="w", command="approve", digest=DIGEST, signed_at=signed_at
        ),
    )


@pytest.mark.parametrize(
    "tampered",
    [
        {"identity": "mallory"},
        {"identity": "Bob"},
        {"workflow_id": "rollout:default/a/other"},
        {"command": "bypass"},
        {"digest": "sha256:" + "f" * 32},
        {"digest": ""},
        {"signed_at": (NOW - timedelta(seconds=1)).isoformat()},
    ],
)
def test_a_signature_counts_for_what_it_signed_only(tampered: dict[str, str]) -> None:
    found = problem(**tampered)
    assert found is not None and "the signature is not valid for this" in found, found
    assert "another identity, workflow, command or plan digest" in found


def test_another_keys_signature_does_not_count() -> None:
    found = problem(signed_by=OTHER)
    assert found is not None and "not valid for this approval" in found
    assert problem(OTHER.public_key, signed_by=OTHER) is None


def test_a_stale_or_future_signature_does_not_count() -> None:
    stale = problem(at=NOW - SIGNATURE_MAX_AGE - timedelta(seconds=1))
    assert stale is not None and "the signature is stale" in stale, stale
    assert "more than 10 minutes before 2026-12-04T12:00:00+00:00" in stale
    future = problem(at=NOW + SIGNATURE_MAX_SKEW + timedelta(seconds=1))
    assert future is not None and "dated in the future" in future, future


def test_no_signature_says_to_approve_through_the_api() -> None:
    found = problem(signature="", signed_at="")
    assert found == (
        "cannot approve: this rollout takes approvals only through the tempoconf API (its access "
        "policy signs them); approve with `tempoconf rollout approve a/b` or "
        "POST /v1/admin/rollouts/a/b:approve"
    )


@pytest.mark.parametrize(
    ("judged", "said"),
    [
        ({"signature": "not base64!"}, "not the base64 of a 64-byte Ed25519 signature"),
        ({"signature": base64.b64encode(b"x" * 63).decode()}, "64-byte Ed25519 signature"),
        ({"signature": "é"}, "64-byte Ed25519 signature"),
        ({"signed_at": "yesterday"}, "is not an ISO 8601 time with a zone"),
        ({"signed_at": "2026-12-04T12:00:00"}, "is not an ISO 8601 time with a zone"),
        ({"signature": ""}, "64-byte Ed25519 signature"),
    ],
)
def test_a_malformed_signature_is_said_so(judged: dict[str, str], said: str) -> None:
    found = problem(**judged)
    assert found is not None and said in found, found


@pytest.mark.parametrize(
    "key",
    [
        "",
        "ed25519:",
        "ed25519:not-base64",
        "ed25519:" + base64.b64encode(b"x" * 31).decode(),
        "rsa:" + base64.b64encode(b"x" * 32).decode(),
        SIGNER.public_key.removeprefix("ed25519:"),
    ],
)
def test_a_malformed_key_is_no_approval_key(key: str) -> None:
    found = approval_key_problem(key)
    assert found is not None and "is not an approval key" in found, found
    refused = problem(key)
    assert refused is not None and "approval key is not an Ed25519 key" in refused


def test_the_request_validates_its_approval_key() -> None:
    request = {"path": "a/b", "value": 1, "approval_key": "ed25519:abc"}
    with pytest.raises(InvalidRequestError) as caught:
        parse_rollout_request(request)
    [found] = caught.value.problems
    assert found.pointer == "/approval_key" and "is not an approval key" in found.message
    plan = plan_from_request(
        parse_rollout_request({**request, "approval_key": SIGNER.public_key}), "0" * 16
    )
    assert plan.approval_key == SIGNER.public_key


def test_only_approve_is_signed_never_halt() -> None:
    assert [name for name, spec in COMMANDS.items() if spec.signed] == ["approve"]
    assert not COMMANDS[CommandName.HALT].signed


# -- the rollout's judgement (RolloutRunState, as the workflow's validator and signal call it) --
def awaiting(approval_key: str) -> RolloutRunState:
    parsed = parse_rollout_request(
        {"path": "a/b", "value": 1, "approval_key": approval_key,
         "stages": [{"channel": "canary", "manual": True}, {"percentile": 50}]}
    )  # fmt: skip
    state = RolloutRunState(
        RolloutProgress(workflow_id=SIGNED["workflow_id"], namespace="default", path="a/b")
    )
    state.set_plan(plan_from_request(parsed, "0" * 16))
    assert state.plan is not None
    state.enter_stage(state.plan.stages[0])
    state.progress.state = RolloutState.AWAITING_APPROVAL
    return state


def signed(command: OperatorCommand, *, at: datetime = NOW) -> OperatorCommand:
    signature, signed_at = SIGNER.sign(
        command.by, SIGNED["workflow_id"], "approve", command.digest, at
    )
    return replace(command, signature=signature, signed_at=signed_at)


def test_a_rollout_with_a_key_refuses_and_ignores_an_unsigned_approve() -> None:
    state = awaiting(SIGNER.public_key)
    assert state.progress.signed_approvals is True
    unsigned = OperatorCommand(by="bob", digest=state.progress.digest)
    refusal = state.refusal(CommandName.APPROVE, unsigned, now=NOW)
    assert refusal is not None and "only through the tempoconf API" in refusal
    assert state.refusal(CommandName.HALT, OperatorCommand(), now=NOW) is None
    effect = state.apply(CommandName.APPROVE, unsigned, at=NOW.isoformat())
    assert not effect.accepted and not state.progress.approved
    assert state.progress.history[-1].reason.startswith(
        "approve ignored: this rollout takes approvals only through the tempoconf API"
    )
    good = signed(unsigned)
    assert state.refusal(CommandName.APPROVE, good, now=NOW) is None
    # judged at the workflow's time: the same signature is stale later
    later = NOW + SIGNATURE_MAX_AGE + timedelta(minutes=1)
    assert "stale" in (state.refusal(CommandName.APPROVE, good, now=later) or "")
    effect = state.apply(CommandName.APPROVE, good, at=NOW.isoformat())
    assert effect.accepted and state.progress.approved
    assert state.progress.history[-1].details["approval"]["signature"] == good.signature


def test_a_rollout_without_a_key_approves_unsigned_as_before() -> None:
    state = awaiting("")
    assert state.progress.signed_approvals is False
    assert state.refusal(CommandName.APPROVE, OperatorCommand(by="bob")) is None
    assert state.apply(CommandName.APPROVE, OperatorCommand(by="bob"), at=NOW.isoformat()).accepted


def test_a_key_without_a_clock_is_a_programming_error() -> None:
    state = awaiting(SIGNER.public_key)
    with pytest.raises(ValueError, match="pass `now`"):
        state.refusal(CommandName.APPROVE, OperatorCommand(by="bob"))
    # an unsigned command needs no clock
    assert state.refusal(CommandName.PAUSE, OperatorCommand(by="bob")) is None


# -- the signing key file -------------------------------------------------------------------
def test_the_signer_reads_the_key_openssl_makes(tmp_path: Path) -> None:
    pem = tmp_path / "signing.pem"
    subprocess.run(
        ["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(pem)],
        check=True,
        capture_output=True,
    )
    signer = CommandSigner.from_pem_file(pem)
    assert approval_key_problem(signer.public_key) is None
    signature, signed_at = signer.sign("bob", "w", "approve", DIGEST, NOW)
    assert (
        signature_problem(
            signer.public_key, signature=signature, signed_at=signed_at, identity="bob",
            workflow_id="w", command="approve", digest=DIGEST, now=NOW,
        )
        is None
    )  # fmt: skip


def test_a_key_file_that_is_no_ed25519_key_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(SigningKeyError, match=f"signing key {missing}: cannot be read"):
        CommandSigner.from_pem_file(missing)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key\n")
    with pytest.raises(SigningKeyError, match="is not an unencrypted PEM private key"):
        CommandSigner.from_pem_file(garbage)
    ec = tmp_path / "ec.pem"
    ec.write_bytes(
        generate_private_key(SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(SigningKeyError, match=r"holds another kind of key \(EC.*\), not Ed25519"):
        CommandSigner.from_pem_file(ec)
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with pytest.raises(SigningKeyError, match="unencrypted") as caught:
        CommandSigner.from_pem_file(encrypted)
    assert "openssl genpkey -algorithm ed25519" in str(caught.value)


def test_an_unkeyed_rollout_records_no_signature_it_did_not_check() -> None:
    state = awaiting("")
    claimed = OperatorCommand(by="bob", signature="made up", signed_at="now")
    assert state.apply(CommandName.APPROVE, claimed, at=NOW.isoformat()).accepted
    assert "signature" not in state.progress.history[-1].details["approval"]


def test_the_key_crosses_continue_as_new() -> None:
    """The next run gets the state as the default converter carries it (workflows/rollout)."""
    from temporalio.converter import DataConverter

    converter = DataConverter.default.payload_converter
    state = awaiting(SIGNER.public_key)
    [payload] = converter.to_payloads([state])
    [carried] = converter.from_payloads([payload], [RolloutRunState])
    assert carried.plan is not None and carried.plan.approval_key == SIGNER.public_key
    assert carried.progress.signed_approvals is True
    unsigned = OperatorCommand(by="bob")
    assert "only through the tempoconf API" in (
        carried.refusal(CommandName.APPROVE, unsigned, now=NOW) or ""
    )


def test_the_registry_flag_decides_which_commands_need_a_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Marking another command `signed` (bypass skips every approval) is all it takes: the
    rollout judges any signed command alike, and the API signs what the registry marks."""
    monkeypatch.setitem(COMMANDS, "bypass", replace(COMMANDS["bypass"], signed=True))
    state = awaiting(SIGNER.public_key)
    unsigned = OperatorCommand(by="bob", reason="hotfix")
    assert state.refusal(CommandName.BYPASS, unsigned, now=NOW) == (
        "cannot bypass: this rollout takes `bypass` only through the tempoconf API (its access "
        "policy signs them); bypass with `tempoconf rollout bypass a/b` or "
        "POST /v1/admin/rollouts/a/b:bypass"
    )
    ignored = state.apply(CommandName.BYPASS, unsigned, at=NOW.isoformat())
    assert not ignored.accepted and state.bypass is None
    assert state.progress.history[-1].reason.startswith("bypass ignored: this rollout takes")
    signature, signed_at = SIGNER.sign("bob", SIGNED["workflow_id"], "bypass", "", NOW)
    good = replace(unsigned, signature=signature, signed_at=signed_at)
    assert state.refusal(CommandName.BYPASS, good, now=NOW) is None
    assert state.apply(CommandName.BYPASS, good, at=NOW.isoformat()).accepted
    # halt, never
    assert state.refusal(CommandName.HALT, OperatorCommand(), now=NOW) is None


def test_a_halt_is_never_refused_for_want_of_a_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COMMANDS, "halt", replace(COMMANDS["halt"], signed=True))
    state = awaiting(SIGNER.public_key)
    assert state.refusal(CommandName.HALT, OperatorCommand(), now=NOW) is None
    assert state.apply(CommandName.HALT, OperatorCommand(reason="x"), at=NOW.isoformat()).accepted
