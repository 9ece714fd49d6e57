"""Validation problems: what is wrong, and where (a JSON pointer into the input)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Problem", "InvalidRequestError", "json_pointer"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: `pointer` is an RFC 6901 JSON pointer ("" is the root)."""

    pointer: str
    message: str

    def __str__(self) -> str:
        return f"{self.pointer or '/'}: {self.message}"


def json_pointer(parts: Iterable[str | int]) -> str:
    """Build a JSON pointer from path parts, escaping `~` and `/` as RFC 6901 requires."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


class InvalidRequestError(ValueError):
    """An input was refused; `problems` lists every reason, each with its location."""

    def __init__(self, problems: Sequence[Problem], *, what: str = "rollout request") -> None:
        self.problems = list(problems)
        self.what = what
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"invalid {what} ({len(self.problems)} problem(s)):\n{lines}")
