"""Which reports are a stage's evidence, and what a check says about them (tempoconf.rollout.health_verdicts), and
the `{since}`/`{elapsed}` placeholders of query and URL templates (tempoconf.gates.check_templates)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tempoconf.gates.check_templates import placeholder_values, render_promql, render_url
from tempoconf.resolution import ClientIdentity
from tempoconf.resolution.bucketing import bucket
from tempoconf.rollout.health_specs import ReportsCheckSpec
from tempoconf.rollout.health_verdicts import (
    HEALTHY,
    NO_DATA,
    UNHEALTHY,
    ReportEvidence,
    ReportTally,
    cohort_stages,
    evidence_since,
    gather_evidence,
    judge_reports,
    reporting_identity,
)
from tempoconf.rollout.plan import PlannedStage, RolloutPlan
from tempoconf.store.records import ReportTotals

PATH = "myproject/server_config"
NEW = "aaaaaaaaaaaaaaaa"
OLD = "bbbbbbbbbbbbbbbb"
NOW = datetime(2025, 3, 1, 12, 5, 0, tzinfo=UTC)
PUBLISHED = datetime(2025, 3, 1, 12, 0, 3, tzinfo=UTC)

CANARY = PlannedStage(index=0, name="channel:canary", channel="canary")
TEN_PERCENT = PlannedStage(index=1, name="10%", percentile=10)
EU = PlannedStage(index=2, name="labels:region=eu", labels={"region": "eu"})
PLAN = RolloutPlan(namespace="default", path=PATH, version=NEW, stages=[CANARY, TEN_PERCENT, EU])


def client_with_bucket(low: int, high: int) -> str:
    return next(f"pct-{n}" for n in range(100_000) if low <= bucket(PATH, f"pct-{n}") < high)


IN_10 = client_with_bucket(0, 1000)
OUT_10 = client_with_bucket(1000, 10_000)


def totals(
    client: str,
    version: str = NEW,
    *,
    ok: int = 10,
    failed: int = 0,
    reports: int = 1,
    channel: str | None = None,
    labels: dict[str, str] | None = None,
    seen: tuple[str | None, dict[str, str]] | None = None,
) -> ReportTotals:
    return ReportTotals(
        client=client,
        version=version,
        ok=ok,
        failed=failed,
        reports=reports,
        channel=channel,
        labels=labels,
        seen_channel=seen[0] if seen else None,
        seen_labels=seen[1] if seen else None,
    )


def evidence(rows: list[ReportTotals], stage: PlannedStage = CANARY) -> ReportEvidence:
    return gather_evidence(
        rows,
        path=PATH,
        version=NEW,
        stages=cohort_stages(PLAN, stage),
        since=PUBLISHED,
        since_reason="stage published",
    )


def test_evidence_starts_at_the_publish_or_the_window_whichever_is_later() -> None:
    assert evidence_since(PUBLISHED, NOW, timedelta(minutes=10)) == (PUBLISHED, "stage published")
    assert evidence_since(PUBLISHED, NOW, timedelta(minutes=1)) == (
        NOW - timedelta(minutes=1),
        "window 1m",
    )
    # An unknown publish time (a check input from before the field existed): the window alone.
    assert evidence_since(None, NOW, timedelta(minutes=5)) == (
        NOW - timedelta(minutes=5),
        "window 5m",
    )


def test_stages_are_cumulative() -> None:
    assert cohort_stages(PLAN, CANARY) == [CANARY]
    assert cohort_stages(PLAN, EU) == [CANARY, TEN_PERCENT, EU]


def test_a_reports_identity_is_its_own_then_the_polled_one_then_none() -> None:
    named = totals("h", channel="beta", labels={}, seen=("canary", {"region": "eu"}))
    assert reporting_identity(named) == ClientIdentity("h", "beta", {})
    polled = totals("h", seen=("canary", {"region": "eu"}))
    assert reporting_identity(polled) == ClientIdentity("h", "canary", {"region": "eu"})
    assert reporting_identity(totals("h")) == ClientIdentity("h")


def test_only_the_cohorts_reports_on_the_version_are_evidence() -> None:
    rows = [
        totals("canary-1", ok=90, failed=10, reports=3, channel="canary", labels={}),
        totals(
            "canary-2", ok=50, failed=0, seen=("canary", {})
        ),  # named none: its polls say canary
        totals(
            "canary-1", OLD, ok=1, failed=9, channel="canary", labels={}
        ),  # cohort, before the switch
        # Outside the cohort, on the rollout's version (a host pinned to it, a stale reporter): left out.
        totals("host-1", ok=0, failed=100, reports=2, channel=None, labels={}),
        totals("host-2", ok=0, failed=100, labels={"region": "eu"}),  # stage 3 is not live yet
        totals(
            IN_10, ok=0, failed=100
        ),  # ditto stage 2, and no identity: only percentiles match it
        # The baseline: outside the cohort, on other versions.
        totals("host-3", OLD, ok=99, failed=1, labels={}),
        totals("host-4", "cccccccccccccccc", ok=100, failed=0),
    ]

    judged = evidence(rows)

    assert judged.cohort == ReportTally(clients=2, ok=140, failed=10, reports=4)
    assert judged.outside == ReportTally(clients=3, ok=0, failed=300, reports=4)
    assert judged.baseline == ReportTally(clients=2, ok=199, failed=1, reports=2)


def test_later_stages_widen_the_cohort() -> None:
    rows = [
        totals("canary-1", channel="canary", labels={}),
        totals(IN_10, labels={}),
        totals(OUT_10, labels={}),
        totals("eu-1", seen=(None, {"region": "eu"})),
        totals("us-1", labels={"region": "us"}),
    ]
    assert (evidence(rows, CANARY).cohort.clients, evidence(rows, CANARY).outside.clients) == (1, 4)
    assert (
        evidence(rows, TEN_PERCENT).cohort.clients,
        evidence(rows, TEN_PERCENT).outside.clients,
    ) == (2, 3)
    assert (evidence(rows, EU).cohort.clients, evidence(rows, EU).outside.clients) == (3, 2)


def spec(**fields: object) -> ReportsCheckSpec:
    return ReportsCheckSpec.model_validate({"kind": "reports", **fields})


def test_the_verdict_says_what_the_evidence_was() -> None:
    rows = [
        totals("canary-1", ok=95, failed=5, channel="canary", labels={}),
        totals("host-1", ok=0, failed=40, reports=40, labels={}),
    ]
    verdict, summary, figures = judge_reports(spec(max_error_ratio=0.1), evidence(rows), now=NOW)

    assert verdict == HEALTHY
    assert summary == (
        "error ratio 0.05 (5 failed of 100 operations, 1 client(s)) within max_error_ratio 0.1; "
        "evidence: 1 cohort client(s) since 12:00:03 UTC (stage published); "
        "40 report(s) from 1 client(s) outside the cohort left out"
    )
    assert figures == {
        "clients": 1,
        "ok": 95,
        "failed": 5,
        "error_ratio": 0.05,
        "since": "2025-03-01T12:00:03+00:00",
        "left_out_clients": 1,
        "left_out_reports": 40,
    }
    # A stage published on an earlier day shows the date.
    _, summary, _ = judge_reports(
        spec(max_error_ratio=0.1), evidence(rows), now=NOW + timedelta(days=1)
    )
    assert "since 2025-03-01 12:00:03 UTC (stage published)" in summary


def test_no_cohort_reports_is_no_data_whatever_the_others_say() -> None:
    rows = [totals(f"host-{n}", ok=1000, labels={}) for n in range(200)]
    verdict, summary, figures = judge_reports(spec(max_error_ratio=0.1), evidence(rows), now=NOW)
    assert verdict == NO_DATA
    assert summary == (
        "0 client(s) of the cohort reported operations on this version; min_clients is 1; "
        "evidence: 0 cohort client(s) since 12:00:03 UTC (stage published); "
        "200 report(s) from 200 client(s) outside the cohort left out"
    )
    assert (figures["clients"], figures["left_out_clients"]) == (0, 200)


def test_the_baseline_is_the_clients_outside_the_cohort() -> None:
    rows = [
        totals("canary-1", ok=70, failed=30, channel="canary", labels={}),
        totals("host-1", OLD, ok=90, failed=10, labels={}),
        totals(
            "canary-2", OLD, ok=0, failed=100, channel="canary", labels={}
        ),  # cohort: not baseline
    ]
    verdict, summary, figures = judge_reports(spec(max_baseline_factor=2), evidence(rows), now=NOW)
    assert verdict == UNHEALTHY
    assert (
        "is more than 2x the baseline's 0.1 (1 client(s) outside the cohort, on other versions)"
        in summary
    )
    assert (figures["baseline_clients"], figures["baseline_error_ratio"]) == (1, 0.1)


def test_since_and_elapsed_placeholders() -> None:
    values = placeholder_values(
        namespace="default",
        path=PATH,
        version=NEW,
        stage="channel:canary",
        published_at=PUBLISHED + timedelta(milliseconds=250),
        now=PUBLISHED + timedelta(seconds=93, milliseconds=900),
    )
    assert values["since"] == "1740830403.25"
    assert values["elapsed"] == "93s"  # rounded down: never reaches back before the publish
    query = 'sum(increase(errors_total{path="{path}",stage="{stage}"}[{elapsed}])) > 0 and time() > {since}'
    assert render_promql(query, values) == (
        'sum(increase(errors_total{path="myproject/server_config",stage="channel:canary"}[93s])) > 0'
        " and time() > 1740830403.25"
    )
    just_published = placeholder_values(
        namespace="default",
        path=PATH,
        version=NEW,
        stage="s",
        published_at=PUBLISHED,
        now=PUBLISHED,
    )
    assert just_published["elapsed"] == "1s"  # PromQL refuses a zero range
    unknown = placeholder_values(
        namespace="default", path=PATH, version=NEW, stage="s", published_at=None, now=NOW
    )
    assert "since" not in unknown and render_promql("x[{elapsed}]", unknown) == "x[{elapsed}]"


def test_url_placeholders_are_url_encoded() -> None:
    values = placeholder_values(
        namespace="team a",
        path=PATH,
        version=NEW,
        stage="channel:canary 10%",
        published_at=PUBLISHED,
        now=NOW,
    )
    url = (
        "https://judge.example/v/{path}?ns={namespace}&stage={stage}&since={since}&t={unknown}&x={"
    )
    assert render_url(url, values) == (
        "https://judge.example/v/myproject/server_config?ns=team%20a&stage=channel%3Acanary%2010%25"
        "&since=1740830403&t={unknown}&x={"
    )


def test_a_changesets_evidence_is_every_configs_reports_each_on_its_new_version() -> None:
    """A changeset: the reports of both configs, each on that config's new version, make one
    tally; a client reporting on both is one client; reports on an old version are baseline."""
    other_new = "cccccccccccccccc"
    first_config = [totals("host-1", ok=10), totals("host-2", OLD, ok=5, channel="stable")]
    second_config = [
        totals("host-1", other_new, ok=7, failed=3),
        totals("host-3", other_new, ok=1, failed=1),
    ]
    everyone = [
        PlannedStage(index=0, name="everyone", labels={}, channel=None, percentile=100),
    ]
    result = gather_evidence(
        [*first_config, *second_config],
        path="changeset:0123456789abcdef",
        version={NEW, other_new},
        stages=everyone,
        since=PUBLISHED,
        since_reason="stage published",
    )
    assert result.cohort == ReportTally(clients=2, ok=18, failed=4, reports=3)
    assert result.baseline == ReportTally(clients=0, ok=0, failed=0, reports=0)
    # The first config alone, as a single-config rollout judges it: the other's reports count not.
    alone = gather_evidence(
        first_config,
        path=PATH,
        version=NEW,
        stages=everyone,
        since=PUBLISHED,
        since_reason="stage published",
    )
    assert alone.cohort == ReportTally(clients=1, ok=10, failed=0, reports=1)
