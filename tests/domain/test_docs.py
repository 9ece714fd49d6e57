"""The repository's own docs: the published bucketing vectors are the implementation's, every page
of the site's nav exists, every local link resolves, and the reference pages written at build time
(docs_gen: the request, the CLI, the HTTP API) are generated and complete."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import yaml

from docs_gen.pages import GENERATED, generated_pages
from tempoconf.api.openapi import openapi_document
from tempoconf.cli.main import build_parser
from tempoconf.contract_schema import rollout_request_schema
from tempoconf.resolution.bucketing import bucket, percentile_threshold
from tempoconf.rollout.request import parse_rollout_request
from tests.domain.test_bucketing import VECTORS
from tests.domain.test_request import DESIGN_EXAMPLE

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CONTRACT = DOCS / "contract.md"
RESOLUTION = DOCS / "explanation" / "resolution.md"
# The pages of the docs site whose text is reference or explanation: no shell commands in them
# (the tutorials and how-to guides hold those, and their tests run them).
NO_COMMAND_PAGES = [
    "contract.md",
    "architecture.md",
    "development.md",
    "explanation/resolution.md",
    "reference/metrics.md",
    "reference/settings.md",
]


def table_after(text: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the Markdown table whose header row is `header`."""
    lines = text.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:  # skip the header and the |---| line
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _json_cell(cell: str) -> str:
    assert cell.startswith("`") and cell.endswith("`"), cell
    return str(json.loads(cell[1:-1]))


@cache
def _generated() -> dict[str, str]:
    return generated_pages(DOCS)


def _nav_pages(nav: object) -> list[str]:
    """Every page path of mkdocs.yml's nav, in order."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def _site_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


# -- the published vectors (explanation/resolution.md) -----------------------------------------
def test_the_documented_vectors_are_the_functions() -> None:
    rows = table_after(RESOLUTION.read_text(encoding="utf-8"), "| path | client_id | bucket |")
    documented = [
        (_json_cell(path), _json_cell(client), int(value)) for path, client, value in rows
    ]
    assert len(documented) >= 10
    for path, client, value in documented:
        assert bucket(path, client) == value, (path, client)
    # the same vectors the bucketing tests pin, so the doc and the tests cannot drift apart
    assert documented == VECTORS


def test_the_documented_thresholds_are_the_functions() -> None:
    rows = table_after(RESOLUTION.read_text(encoding="utf-8"), "| percentile | threshold |")
    assert len(rows) >= 8
    for percentile, threshold in rows:
        assert percentile_threshold(float(percentile)) == int(threshold), percentile


def test_the_docs_publish_the_formula_the_tests_check() -> None:
    text = RESOLUTION.read_text(encoding="utf-8")
    assert (
        "bucket(path, client_id) = int.from_bytes(md5(path.encode() + client_id.encode())"
        '.digest()[:8], "big") % 10000'
    ) in text
    assert "iff `bucket < round(p * 100)`" in text
    # the contract names the formula and points at the page that publishes it
    assert "(explanation/resolution.md)" in CONTRACT.read_text(encoding="utf-8")


def test_the_contracts_example_request_is_valid_and_the_one_the_tests_parse() -> None:
    text = CONTRACT.read_text(encoding="utf-8")
    block = re.search(r"```json\n(.*?)\n```", text, re.S)
    assert block is not None
    example = json.loads(block.group(1))
    assert example == DESIGN_EXAMPLE
    parse_rollout_request(example)


# -- the site: nav, links, pages -----------------------------------------------------------------
def test_every_page_of_the_nav_exists_and_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_pages(config["nav"])
    assert len(nav) == len(set(nav)), "a page is twice in the nav"
    for page in nav:
        assert (DOCS / page).is_file() or page in GENERATED, f"mkdocs.yml's nav names {page}"
    on_disk = {str(page.relative_to(DOCS)) for page in _site_pages()}
    assert on_disk - set(nav) == set(), "pages missing from mkdocs.yml's nav"
    assert set(GENERATED) <= set(nav)


def test_no_generated_page_is_a_file() -> None:
    """A file at a generated page's path would stand in for the page the code writes."""
    assert [page for page in GENERATED if (DOCS / page).exists()] == []


def test_every_local_link_of_the_readme_and_docs_exists() -> None:
    generated = {DOCS / page for page in GENERATED}
    for document in [ROOT / "README.md", *_site_pages()]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", document.read_text("utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (document.parent / target).resolve()
            assert resolved.exists() or resolved in generated, (
                f"{document.relative_to(ROOT)} links to missing {target}"
            )


def test_the_reference_and_explanation_pages_show_no_shell_commands() -> None:
    for page in NO_COMMAND_PAGES:
        text = (DOCS / page).read_text(encoding="utf-8")
        assert not re.search(r"```(sh|bash|console|shell)\b", text), page


# -- the generated pages ---------------------------------------------------------------------------
def test_every_field_of_the_request_schema_has_a_description() -> None:
    schema = rollout_request_schema()
    objects = {"RolloutRequest": schema, **schema["$defs"]}
    missing = [
        f"{name}.{field}"
        for name, node in objects.items()
        for field, field_schema in node.get("properties", {}).items()
        if not field_schema.get("description")
    ]
    assert missing == [], (
        "give these a docstring in their model (tempoconf/rollout/request.py, ...)"
    )


def test_the_request_page_documents_every_field_of_every_object() -> None:
    page = _generated()["reference/request.md"]
    schema = json.loads((DOCS / "rollout-request.schema.json").read_text(encoding="utf-8"))
    objects = {"RolloutRequest": schema, **schema["$defs"]}
    for name, node in objects.items():
        section = page.split(f"{{#{name.lower()}}}", 1)[1].split("\n## ", 1)[0]
        for field, field_schema in node["properties"].items():
            row = next(line for line in section.splitlines() if line.startswith(f"| `{field}` |"))
            assert " ".join(field_schema["description"].split()) in row, (name, field)
    # the defaults, in the form a request takes them
    assert "| `default_cooldown_time` | [duration](../contract.md#durations) | `300s` |" in page
    assert "At least one of `channel`, `percentile`, `labels` (not null)." in page
    assert "`applied_window` only with `min_applied`." in page


def test_the_cli_page_documents_every_command_and_flag() -> None:
    page = _generated()["reference/cli.md"]

    def visit(parser: object, depth: int) -> int:
        import argparse

        assert isinstance(parser, argparse.ArgumentParser)
        assert f"`{parser.prog}`" in page, parser.prog
        for action in parser._actions:
            for option in action.option_strings:
                if action.help != argparse.SUPPRESS and option not in ("-h", "--help"):
                    assert f"`{option}" in page, (parser.prog, option)
        count = 1
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    count += visit(sub, depth + 1)
        return count

    assert visit(build_parser(), 0) >= 30
    assert "usage: tempoconf rollout approve [-h]" in page
    assert "--worker-index" not in page  # suppressed: set by the supervisor, not for people


def test_the_http_api_page_documents_every_operation() -> None:
    page = _generated()["reference/http-api.md"]
    document = openapi_document()
    operations = [
        (method.upper(), path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in ("get", "put", "post", "delete", "patch", "head")
    ]
    assert len(operations) >= 28
    for method, path, operation in operations:
        assert f"### `{method} {path}`" in page, (method, path)
        for status in operation["responses"]:
            assert f"| `{status}` |" in page
    # the request's objects are on the request's page, once
    assert "[RolloutRequest](request.md#rolloutrequest)" in page
    assert "{#stagespec}" not in page
    assert "### ConfigAnswer {#configanswer}" in page


def test_the_getting_started_page_is_the_readmes_first_sections_written_once() -> None:
    """The site's first stop shows the README's two commands and walkthrough as the README has
    them (its tests run them); no page of docs/ repeats them, and the home links to it."""
    page = _generated()["getting-started.md"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for heading in ("Two commands", "What you just saw", "Walkthrough"):
        section = readme.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0].strip()
        assert f"## {heading}\n\n{section}\n" in page, heading
    assert "make run ARGS=" in page and ".venv/bin/tempoconf rollout advance" in page
    assert "## Where next" not in page  # the site has its own nav
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert _nav_pages(config["nav"])[:2] == ["index.md", "getting-started.md"]
    assert "](getting-started.md)" in (DOCS / "index.md").read_text(encoding="utf-8")
    walkthrough_start = "--workflow-id 'rollout:default/myproject/server_config'"
    assert [page for page in _site_pages() if walkthrough_start in page.read_text("utf-8")] == []


def test_the_http_api_page_says_what_each_token_is_once() -> None:
    """Each operation names its token and role; what a token is, is said in one section."""
    page = _generated()["reference/http-api.md"]
    schemes = openapi_document()["components"]["securitySchemes"]
    assert len(schemes) >= 3
    for name, scheme in schemes.items():
        description = " ".join(scheme["description"].split())
        assert page.count(description) == 1, (name, page.count(description))
    admin = page.split("### `POST /v1/admin/rollouts`", 1)[1].split("\n### ", 1)[0]
    assert re.search(r"\*Auth\*: \[`adminToken`\]\(#authentication\); .* role", admin), admin
    assert "{#authentication}" in page


def test_the_settings_page_names_every_variable_the_code_reads() -> None:
    read = {
        name
        for folder in ("tempoconf", "api", "cli", "activities", "workflows")
        for file in (ROOT / folder).rglob("*.py")
        for name in re.findall(r'"(TEMPOCONF_[A-Z_]+)"', file.read_text(encoding="utf-8"))
    }
    documented = (DOCS / "reference" / "settings.md").read_text(encoding="utf-8")
    documented += _generated()["reference/cli.md"]  # the agent's --exec variables, with its flag
    assert len(read) >= 20
    assert sorted(name for name in read if f"`{name}`" not in documented and name not in
                  documented) == []  # fmt: skip


def test_the_metrics_page_names_every_metric_the_code_exports() -> None:
    """Each metric family the API, an edge and the client SDK define, by the name a scrape shows
    (a counter's with `_total`)."""
    exported = []
    for source in ("api/metrics.py", "api/edge_app.py"):
        text = (ROOT / source).read_text(encoding="utf-8")
        for kind, name in re.findall(
            r'(Counter|Gauge|Histogram)MetricFamily\(\s*"([a-z_]+)"', text
        ):
            exported.append(name + "_total" if kind == "Counter" else name)
    exported.append("tempoconf_agent_config_version")
    documented = (DOCS / "reference" / "metrics.md").read_text(encoding="utf-8")
    assert len(exported) >= 18
    assert [name for name in exported if not re.search(rf"`{name}[{{`]", documented)] == []


def test_no_file_refers_to_a_design_document_the_repository_lacks() -> None:
    skipped = {".git", ".venv", ".tempoconf", "__pycache__", ".pytest_cache", ".ruff_cache", "site"}
    mentions = [
        str(file.relative_to(ROOT))
        for file in ROOT.rglob("*")
        if file.is_file()
        and not skipped.intersection(file.relative_to(ROOT).parts)
        and not any(part.endswith(".egg-info") for part in file.relative_to(ROOT).parts)
        and file.suffix in {".py", ".md", ".toml", ".json", ".cfg", ".txt", ""}
        and "DESIGN" + ".md" in file.read_text(encoding="utf-8", errors="replace")
    ]
    assert mentions == [], f"these files name a {'DESIGN' + '.md'} the repository lacks: {mentions}"
