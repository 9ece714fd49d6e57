"""The generated reference pages, by their path in the site: what docs_gen/hooks.py adds to a
build and what tests/domain/test_docs.py builds to check that every generator still runs."""

from __future__ import annotations

import json
from pathlib import Path

from docs_gen.cli_page import cli_page
from docs_gen.getting_started_page import getting_started_page
from docs_gen.http_api_page import http_api_page
from docs_gen.request_page import SCHEMA_FILE, request_page

__all__ = ["GENERATED", "generated_pages"]

GENERATED = (
    "getting-started.md",
    "reference/request.md",
    "reference/cli.md",
    "reference/http-api.md",
)
"""The pages written at build time (never files of docs/)."""


def generated_pages(docs_dir: Path) -> dict[str, str]:
    """Each generated page's Markdown by its path under `docs_dir`."""
    # Imported here: the API's and the CLI's modules, only when a build asks for their pages.
    from tempoconf.api.openapi import openapi_document
    from tempoconf.cli.main import build_parser

    request_schema = json.loads((docs_dir / SCHEMA_FILE).read_text(encoding="utf-8"))
    request_objects = {"RolloutRequest", *request_schema.get("$defs", {})}
    pages = {
        "getting-started.md": getting_started_page(docs_dir.parent / "README.md"),
        "reference/request.md": request_page(docs_dir),
        "reference/cli.md": cli_page(build_parser()),
        "reference/http-api.md": http_api_page(openapi_document(), request_objects),
    }
    assert tuple(pages) == GENERATED
    return pages
