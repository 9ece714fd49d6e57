"""docs/how-to/verdicts.md says what the code does: its request is examples/rollout-sequential.json
(a valid request), its verdict lines are what the judge writes for the evidence built here, the
summary it quotes is the one an inconclusive check settled by `on_inconclusive` gets, and it names
every field of the judge."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from tempoconf.rollout.health_specs import ReportsCheckSpec, SequentialJudgeSpec
from tempoconf.rollout.progress import CheckResult, Verdict
from tempoconf.rollout.request import parse_rollout_request
from tempoconf.rollout.sequential import RatioSums
from tempoconf.rollout.sequential_verdicts import GroupSums, judge_sequential, settle_inconclusive

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "how-to" / "verdicts.md"
EXAMPLE = ROOT / "examples" / "rollout-sequential.json"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def _group(seed: int, clients: int, operations: int, rate: float) -> GroupSums:
    """Clients with about `operations` each (half to one and a half times), each failing at `rate`."""
    draw = random.Random(seed)
    pairs = []
    for _ in range(clients):
        total = draw.randint(operations // 2, operations * 3 // 2)
        pairs.append((sum(draw.random() < rate for _ in range(total)), total))
    return GroupSums(RatioSums.of(pairs), RatioSums())


def test_the_pages_request_is_the_example_and_valid() -> None:
    (shown,) = _blocks("json")
    example = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert json.loads(shown) == example
    check = parse_rollout_request(example).health[0]
    assert isinstance(check, ReportsCheckSpec) and check.judge is not None
    assert check.max_error_ratio is None and check.max_baseline_factor is None


def test_the_pages_verdict_lines_are_what_the_judge_writes() -> None:
    """A 0.4% baseline of 960 clients; 37 cohort clients at 2% (regression) and at 0.4% (no
    regression); 6 cohort clients at 0.8% (too few operations to tell)."""
    (shown,) = _blocks("text")
    judge = SequentialJudgeSpec(max_increase=0.005)
    baseline = _group(1, 960, 53, 0.004)
    judged = [
        judge_sequential(judge, _group(2, clients, 114, rate), baseline)
        for clients, rate in [(37, 0.02), (37, 0.004), (6, 0.008)]
    ]
    assert [verdict for verdict, _, _ in judged] == [
        Verdict.UNHEALTHY,
        Verdict.HEALTHY,
        Verdict.INCONCLUSIVE,
    ]
    assert shown.splitlines() == [summary for _, summary, _ in judged]


def test_the_quoted_settled_summary_is_the_one_the_check_gets() -> None:
    quoted = re.search(r"The summary says so: `([^`]+)`", PAGE.read_text(encoding="utf-8"))
    assert quoted is not None
    judge = SequentialJudgeSpec(max_increase=0.005, on_inconclusive="pass")
    inconclusive = CheckResult(0, "reports", "reports", Verdict.INCONCLUSIVE, "inconclusive: ...")
    settled = settle_inconclusive(inconclusive, judge, final=True, extension_over=False)
    assert settled.verdict == Verdict.HEALTHY
    assert settled.summary.endswith(f"({quoted.group(1)})"), settled.summary


def test_the_page_names_every_field_of_the_judge_and_the_methods_source() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for field in SequentialJudgeSpec.model_fields:
        assert f"`{field}`" in text, field
    for field in ("latency_count", "latency_sum_ms", "on_no_data"):
        assert f"`{field}`" in text, field
    assert "Johari, Koomen, Pekelis and Walsh" in text and "2022" in text
    # The measured error rates are another page's: named by its section, as written there.
    assert 'The figures are in `bench/README.md`, under "Issue 29, verdicts".' in text
    bench = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    assert "\n### Issue 29, verdicts (" in bench
