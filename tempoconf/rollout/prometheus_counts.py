"""A judged prometheus check's counts: its four queries' series joined into each client's failed
and total operations, and the sequential judge's verdict on them (pure; the health activity asks
Prometheus).

Every series of a counts query is a client. A client's failed and total series are the ones with
the same labels, the metric name aside (as PromQL's own vector matching): a total series without a
failed series is a client with no failure; a failed series without a total series cannot be a rate
and is left out, and the figures say so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tempoconf.rollout.health_specs import PrometheusCheckSpec
from tempoconf.rollout.progress import Verdict
from tempoconf.rollout.sequential import RatioSums
from tempoconf.rollout.sequential_verdicts import GroupSums, judge_sequential

__all__ = ["JoinedCounts", "LabelledSample", "join_counts", "judge_counts", "series_name"]

LabelledSample = tuple[Mapping[str, str], float]
"""One series of an instant query's answer: its labels and its value."""

_SHOWN = 5
"""Label sets of left-out series shown in the figures (their number is always there)."""


@dataclass(frozen=True)
class JoinedCounts:
    """One side's clients: failed over total operations, and the series that could not be used."""

    sums: RatioSums
    failed_without_total: list[str] = field(default_factory=list)
    """Failed series with no total series of the same labels, as `{label="value"}`."""
    unreadable: list[str] = field(default_factory=list)
    """Clients with a series whose value is no finite number (NaN from 0/0, +Inf): left out."""


def series_name(labels: Mapping[str, str]) -> str:
    """`{instance="a:9100",job="api"}`, the metric name left out: what joins the two series."""
    inner = ",".join(f'{name}="{value}"' for name, value in sorted(_key(labels)))
    return "{" + inner + "}"


def _key(labels: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset((name, value) for name, value in labels.items() if name != "__name__")


def _by_client(
    samples: Iterable[LabelledSample], unreadable: dict[frozenset[tuple[str, str]], str]
) -> dict[frozenset[tuple[str, str]], float]:
    # Two series with one label set once the name is dropped (`{__name__=~"a|b"}`) are added up.
    values: dict[frozenset[tuple[str, str]], float] = {}
    for labels, value in samples:
        key = _key(labels)
        if not math.isfinite(value):
            unreadable[key] = series_name(labels)
            continue
        values[key] = values.get(key, 0.0) + value
    return values


def join_counts(failed: Iterable[LabelledSample], total: Iterable[LabelledSample]) -> JoinedCounts:
    """Each client's (failed, total), joined by labels, as the sums a sequential judge reads; a
    client with a series of no finite value is left out (its rate is unknown)."""
    unreadable: dict[frozenset[tuple[str, str]], str] = {}
    failed_by_client = _by_client(failed, unreadable)
    total_by_client = _by_client(total, unreadable)
    without_total = sorted(
        series_name(dict(key)) for key in failed_by_client if key not in total_by_client
    )
    sums = RatioSums.of(
        (failed_by_client.get(key, 0.0), operations)
        for key, operations in total_by_client.items()
        if key not in unreadable
    )
    return JoinedCounts(sums, without_total, sorted(set(unreadable.values())))


def judge_counts(
    spec: PrometheusCheckSpec, cohort: JoinedCounts, baseline: JoinedCounts
) -> tuple[Verdict, str, dict[str, Any]]:
    """The sequential judge on the cohort's error rate against the baseline's (the check has a
    judge: its validator); the series left out are named in the summary and the figures."""
    assert spec.judge is not None
    verdict, summary, figures = judge_sequential(
        spec.judge.sequential,
        GroupSums(cohort.sums, RatioSums()),
        GroupSums(baseline.sums, RatioSums()),
    )
    notes = []
    for side, joined in (("cohort", cohort), ("baseline", baseline)):
        for name, what, series in (
            ("without_total", "failed series without a total series", joined.failed_without_total),
            ("not_finite", "clients with a series of no finite value", joined.unreadable),
        ):
            if not series:
                continue
            shown = ", ".join(series[:_SHOWN]) + (", ..." if len(series) > _SHOWN else "")
            notes.append(f"{len(series)} {side} {what} left out ({shown})")
            figures.setdefault("left_out", {})[f"{side}_{name}"] = {
                "series": len(series),
                "labels": series[:_SHOWN],
            }
    if notes:
        summary = f"{summary}; {'; '.join(notes)}"
    return verdict, summary, figures
