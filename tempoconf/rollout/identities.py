"""Who is who, for four eyes: identities in their spaces, and authors and emails normalised
(docs/contract.md, Four-eyes approvals).

An identity is a name in a space. A static one (a policy token's name, a named admin token's) is
a bare name, `bob`; one from another space is `SPACE:subject`, `oidc:bob` for an OpenID subject
(tempoconf.access.identity decides which principal is in which space). So an OpenID `bob` and a
token `bob` are two approvers. An identity may come with emails the access policy (or a verified
OpenID `email` claim) gives it; the API carries them in the approve it signs.

An author is free text (`Mallory <mallory@example.com>`, `mallory+x@example.com`, `mallory`): it
is normalised (case folded, `Name <email>` to the email, a `+tag` of the local part dropped) and
matched on the whole and on its part before the `@`, against an approver's subject (its identity
without the space) and emails. An approver whose identity or emails match the author's is the
author.

Pure: the workflow's four-eyes check (tempoconf.rollout.approvals) calls these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "SPACE_SEPARATOR",
    "identity_subject",
    "in_space",
    "normal_person",
    "person_forms",
    "person_keys",
]

SPACE_SEPARATOR = ":"
# A space is a short lowercase word; a static name never holds a ':' (the policy's and the named
# admin tokens' names cannot).
_SPACED = re.compile(r"^([a-z][a-z0-9-]{0,15}):(.+)$", re.DOTALL)
_NAME_ADDR = re.compile(r"^[^<>]*<([^<>]+)>\s*$")


def in_space(space: str, subject: str) -> str:
    """The identity of `subject` in `space` (`oidc:bob`)."""
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,15}", space):
        raise ValueError(f"{space!r} is not an identity space (a short lowercase word)")
    return f"{space}{SPACE_SEPARATOR}{subject}"


def identity_subject(identity: str) -> str:
    """An identity without its space (`oidc:bob` -> `bob`; a static `bob` stays `bob`)."""
    spaced = _SPACED.match(identity.strip())
    return spaced.group(2) if spaced else identity.strip()


def normal_person(text: str) -> str:
    """`text` as one person is named: case folded, `Name <email>` the email, an email's `+tag`
    dropped (`Mallory <Mallory+x@Example.com>` -> `mallory@example.com`)."""
    folded = text.strip().casefold()
    addressed = _NAME_ADDR.match(folded)
    if addressed:
        folded = addressed.group(1).strip()
    local, at, domain = folded.rpartition("@")
    if not at:
        return folded
    return f"{local.split('+', 1)[0]}@{domain}"


def person_forms(text: str) -> set[str]:
    """What `text` matches on: its normal form, and that form's part before the `@` (`alice`
    is `alice@example.com` is `Alice@laptop`)."""
    normal = normal_person(text)
    return {normal, normal.rpartition("@")[0] if "@" in normal else normal} - {""}


def person_keys(identity: str, emails: Iterable[str] = ()) -> set[str]:
    """Every form an identity (in its space) and its emails match on."""
    keys = person_forms(identity) if identity.strip() else set()
    for email in emails:
        keys |= person_forms(email)
    return keys
