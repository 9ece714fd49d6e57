"""The repository's own docs: the contract's bucketing vectors are the implementation's, and every
document the README points at exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tempoconf.bucketing import bucket, percentile_threshold
from tempoconf.request import parse_rollout_request
from tests.domain.test_bucketing import VECTORS
from tests.domain.test_request import DESIGN_EXAMPLE

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "docs" / "contract.md"


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


def test_the_documented_vectors_are_the_functions() -> None:
    rows = table_after(CONTRACT.read_text(encoding="utf-8"), "| path | client_id | bucket |")
    documented = [
        (_json_cell(path), _json_cell(client), int(value)) for path, client, value in rows
    ]
    assert len(documented) >= 10
    for path, client, value in documented:
        assert bucket(path, client) == value, (path, client)
    # the same vectors the bucketing tests pin, so the doc and the tests cannot drift apart
    assert documented == VECTORS


def test_the_documented_thresholds_are_the_functions() -> None:
    rows = table_after(CONTRACT.read_text(encoding="utf-8"), "| percentile | threshold |")
    assert len(rows) >= 8
    for percentile, threshold in rows:
        assert percentile_threshold(float(percentile)) == int(threshold), percentile


def test_the_contract_publishes_the_formula_the_tests_check() -> None:
    text = CONTRACT.read_text(encoding="utf-8")
    assert (
        "bucket(path, client_id) = int.from_bytes(md5(path.encode() + client_id.encode())"
        '.digest()[:8], "big") % 10000'
    ) in text
    assert "iff `bucket < round(p * 100)`" in text


def test_the_contracts_example_request_is_valid_and_the_one_the_tests_parse() -> None:
    text = CONTRACT.read_text(encoding="utf-8")
    block = re.search(r"```json\n(.*?)\n```", text, re.S)
    assert block is not None
    example = json.loads(block.group(1))
    assert example == DESIGN_EXAMPLE
    parse_rollout_request(example)


def test_every_local_link_of_the_readme_and_docs_exists() -> None:
    for document in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)\)", document.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (document.parent / target).exists(), f"{document.name} links to missing {target}"


def test_no_file_refers_to_a_design_document_the_repository_lacks() -> None:
    skipped = {".git", ".venv", ".tempoconf", "__pycache__", ".pytest_cache", ".ruff_cache"}
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
