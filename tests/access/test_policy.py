"""The access policy file: what it grants, and every way it can be wrong, each named with its
place in the file."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tempoconf.access.identity import Principal, PrincipalKind
from tempoconf.access.policy import PolicyError, load_policy, parse_policy
from tempoconf.access.roles import Role
from tempoconf.access.source import PolicySource


def sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


POLICY: dict[str, Any] = {
    "tokens": [
        {
            "name": "alice",
            "secret_sha256": sha("alice-secret"),
            "grants": [{"namespaces": ["team-a", "team-a-*"], "roles": ["operator"]}],
        },
        {
            "name": "root",
            "secret_sha256": sha("root-secret"),
            "grants": [{"namespaces": ["*"], "roles": ["admin"]}],
        },
    ],
    "clients": [
        {"name": "fleet-a", "secret_sha256": sha("fleet-secret"), "namespaces": ["team-a"]}
    ],
    "oidc": {"issuer": "http://127.0.0.1:1/", "audience": "tempoconf"},
    "groups": {"sre": [{"namespaces": ["*"], "roles": ["approver"]}]},
    "signing_key": "signing.pem",
}


def test_tokens_and_clients_are_found_by_their_secret_only(tmp_path: Path) -> None:
    policy = parse_policy(POLICY, source=tmp_path / "access.json")
    alice = policy.token(b"alice-secret")
    assert alice is not None and alice.name == "alice"
    assert policy.token(b"fleet-secret") is None  # a client's secret is no operator's
    assert policy.client(b"fleet-secret") is not None
    assert policy.token(b"alice-secret ") is None
    assert policy.token(sha("alice-secret").encode()) is None  # the digest is not the secret
    assert "alice-secret" not in repr(policy) and sha("alice-secret") not in repr(alice)
    assert policy.signing_key == tmp_path / "signing.pem"  # relative to the policy file


def test_roles_hold_what_they_include_in_the_namespaces_granted(tmp_path: Path) -> None:
    policy = parse_policy(POLICY, source=tmp_path / "access.json")
    alice_entry = policy.token(b"alice-secret")
    assert alice_entry is not None
    alice = Principal("alice", PrincipalKind.TOKEN, alice_entry.grants)
    assert alice.may(Role.OPERATOR, "team-a")
    assert alice.may(Role.VIEWER, "team-a-eu")  # every role reads; `team-a-*` matches
    assert not alice.may(Role.APPROVER, "team-a")  # who starts is not who approves
    assert not alice.may(Role.OPERATOR, "team-ab")  # `team-a-*` is not `team-a*`
    assert not alice.may(Role.VIEWER, "team-b")
    assert alice.roles_in("team-b") == frozenset()
    root_entry = policy.token(b"root-secret")
    assert root_entry is not None
    root = Principal("root", PrincipalKind.TOKEN, root_entry.grants)
    assert all(root.may(role, "anything") for role in Role)
    sre = Principal("bob", PrincipalKind.OIDC, policy.group_grants(["sre", "unknown"]))
    assert sre.may(Role.APPROVER, "team-b") and not sre.may(Role.OPERATOR, "team-b")
    assert Principal("x", PrincipalKind.OIDC, policy.group_grants([])).roles_in("team-a") == set()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda p: p["tokens"][0].update(secret_sha256="alice-secret"), "/tokens/0/secret_sha256"),
        (
            lambda p: p["tokens"][0]["grants"][0].update(roles=["owner"]),
            "/tokens/0/grants/0/roles/0",
        ),
        (
            lambda p: p["tokens"][0]["grants"][0].update(namespaces=["Team A"]),
            "/tokens/0/grants/0/namespaces/0: 'Team A' is not a namespace",
        ),
        (lambda p: p["clients"][0].update(namespaces=[]), "/clients/0/namespaces"),
        (lambda p: p.update(extra=1), "/: Additional properties are not allowed ('extra'"),
        (lambda p: p["oidc"].pop("audience"), "/oidc: 'audience' is a required property"),
        (lambda p: p["oidc"].update(issuer="ftp://x"), "/oidc/issuer"),
        (lambda p: p.pop("signing_key"), "/signing_key: required when the policy names operators"),
        (lambda p: p["groups"].update(ops=[{"roles": ["viewer"]}]), "/groups/ops/0"),
        (
            lambda p: p["tokens"][1].update(name="alice"),
            "/tokens/1/name: 'alice' is named twice in tokens",
        ),
        (
            lambda p: p["clients"][0].update(secret_sha256=sha("root-secret")),
            "/clients/0/secret_sha256: the same secret as /tokens/1",
        ),
    ],
)
def test_a_wrong_policy_is_refused_naming_the_place(
    tmp_path: Path, change: Any, expected: str
) -> None:
    raw = json.loads(json.dumps(POLICY))
    change(raw)
    with pytest.raises(PolicyError) as refused:
        parse_policy(raw, source=tmp_path / "access.json")
    assert expected in str(refused.value), str(refused.value)
    assert str(refused.value).startswith(f"invalid access policy {tmp_path / 'access.json'}")


def test_a_file_that_is_not_json_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "access.json"
    path.write_text('{"tokens": [\n  {"name": "a",}\n]}')
    with pytest.raises(PolicyError, match=r"not JSON: .* at line 2"):
        load_policy(path)
    with pytest.raises(PolicyError, match="cannot read it"):
        load_policy(tmp_path / "missing.json")


def test_the_source_follows_the_file_and_keeps_the_last_good_policy(tmp_path: Path) -> None:
    path = tmp_path / "access.json"
    path.write_text(json.dumps(POLICY))
    source = PolicySource(path, check_every=0)
    assert source.current().token(b"alice-secret") is not None
    changed = json.loads(json.dumps(POLICY))
    changed["tokens"][0]["secret_sha256"] = sha("rotated")
    path.write_text(json.dumps(changed))
    os.utime(path, ns=(1, 1))  # a different mtime even within the clock's granularity
    policy = source.current()
    assert policy.token(b"alice-secret") is None and policy.token(b"rotated") is not None
    path.write_text('{"tokens": ')  # broken: the policy before stays in force
    os.utime(path, ns=(2, 2))
    assert source.current() is policy
    assert source.error is not None and source.failed_reloads == 1
