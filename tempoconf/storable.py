"""Text the store can keep, on every backend alike.

PostgreSQL's `text` and `jsonb` cannot hold the NUL character (U+0000), and no backend can store a
lone surrogate (`"\\ud800"` in JSON decodes to a string that is not valid Unicode, so it cannot be
encoded as UTF-8). Both would pass every other check and fail deep inside a write, as a 500 or an
activity retried until it gives up. So every string that can reach the store is checked where it
comes in (a request body, a poll's query, a rollout request, a schema), with a problem that names
the field; SQLite and PostgreSQL then refuse exactly the same input.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator

from tempoconf.problems import Problem, json_pointer

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_TEXT_PROBLEMS",
    "STORABLE",
    "StorableText",
    "json_depth_problem",
    "json_text_problems",
    "storable_text",
    "text_problem",
]

MAX_TEXT_PROBLEMS = 20
"""At most this many strings are named in one answer (a value may hold thousands)."""
MAX_JSON_DEPTH = 100
"""Deepest nesting of arrays and objects in a value or a schema. Deeper would be stored, then fail
every answer that carries it (pydantic serializes some 250 levels at most): a poll, a plan."""


def text_problem(text: str) -> str | None:
    """Why the store cannot keep `text` as it is, or None when it can."""
    index = text.find("\x00")
    if index >= 0:
        return (
            f"contains a NUL character (\\u0000) at index {index}, which the store cannot keep; "
            "remove it"
        )
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            return (
                f"contains a lone surrogate (\\u{ord(text[error.start]):04x}) at index "
                f"{error.start}: not valid Unicode, which the store cannot keep"
            )
    return None


def storable_text(text: str) -> str:
    """`text` with every character the store cannot keep replaced by U+FFFD: for what cannot be
    refused (a signal's reason), so that it is recorded rather than failing the audit write."""
    if text_problem(text) is None:
        return text
    return "".join(
        "\ufffd" if char == "\x00" or "\ud800" <= char <= "\udfff" else char for char in text
    )


def _refuse_unstorable(text: str) -> str:
    problem = text_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text


STORABLE = AfterValidator(_refuse_unstorable)
"""Refuses a pydantic string the store cannot keep, with `text_problem`'s message. It goes after
the field's own constraints (`Annotated[str, Field(max_length=...), STORABLE]`), which then keep
their string messages."""
StorableText = Annotated[str, STORABLE]
"""A pydantic string field the store can keep."""


def json_text_problems(document: Any, pointer: str = "") -> list[Problem]:
    """A problem for every string of a JSON document (object keys included, at any depth) that
    the store cannot keep, each at its JSON pointer under `pointer`; at most MAX_TEXT_PROBLEMS."""
    problems: list[Problem] = []
    # A stack rather than recursion: a value nested deeper than Python's recursion limit is
    # refused elsewhere with its own message, and must not make this check crash first. Each
    # entry: (pointer, node, whether the node is the key of the member at pointer).
    stack: list[tuple[str, Any, bool]] = [(pointer, document, False)]
    while stack and len(problems) < MAX_TEXT_PROBLEMS:
        where, node, is_key = stack.pop()
        if isinstance(node, str):
            _add(problems, where, node, "the key " if is_key else "")
        elif isinstance(node, dict):
            for key, member in reversed(list(node.items())):
                member_pointer = where + json_pointer([str(key)])
                stack.append((member_pointer, member, False))
                stack.append((member_pointer, key, True))  # popped first: the key, then its value
        elif isinstance(node, list | tuple):
            for index in reversed(range(len(node))):
                stack.append((where + json_pointer([index]), node[index], False))
    return problems


def json_depth_problem(document: Any, pointer: str = "") -> Problem | None:
    """A problem at `pointer` when `document` nests arrays and objects more than MAX_JSON_DEPTH
    levels deep, else None. A stack, not recursion, as json_text_problems."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list | tuple):
            if depth > MAX_JSON_DEPTH:
                return Problem(
                    pointer,
                    f"nested more than {MAX_JSON_DEPTH} levels deep (arrays and objects)",
                )
            members = node.values() if isinstance(node, dict) else node
            stack.extend((member, depth + 1) for member in members)
    return None


def _add(problems: list[Problem], where: str, text: str, what: str) -> None:
    problem = text_problem(text)
    if problem is not None:
        problems.append(Problem(_printable(where), f"{what}{problem}" if what else problem))


def _printable(pointer: str) -> str:
    # The pointer may contain the very character it reports: shown escaped, never raw (a lone
    # surrogate could not even be encoded into the answer).
    if pointer.isprintable():
        return pointer
    return "".join(char if char.isprintable() else f"\\u{ord(char):04x}" for char in pointer)
