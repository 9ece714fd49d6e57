"""getting-started.md: the README's two commands, what the demo showed, the core ideas and the
walkthrough, taken from README.md when the site is built. The README stays the one place they are
written (its tests run it as written), and the site shows the same text."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["SECTIONS", "getting_started_page"]

SECTIONS = ("Two commands", "What you just saw", "Core ideas", "Walkthrough")
"""The README's sections the page shows, in the README's order."""

_INTRO = """\
# Getting started

This page is the first part of the repository's `README.md`, as it is there.
Run its commands from the root of a clone.
"""


def getting_started_page(readme: Path) -> str:
    """The page's Markdown, from `readme` (the repository's README.md)."""
    text = readme.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.M)
    by_heading = {part.split("\n", 1)[0].strip(): part for part in parts[1:]}
    missing = [heading for heading in SECTIONS if heading not in by_heading]
    if missing:
        raise RuntimeError(f"README.md has no section {missing}: docs_gen/getting_started_page.py")
    sections = ["## " + by_heading[heading].rstrip() + "\n" for heading in SECTIONS]
    # The README links into docs/ from the repository root; the page sits at the docs' root.
    body = re.sub(r"\]\(docs/", "](", "\n".join(sections))
    return _INTRO + "\n" + body
