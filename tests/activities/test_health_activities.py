"""The reports check on a real store: the stage's evidence starts at its publish, to the microsecond,
and comes from its cohort only (cumulative stages; a report's own identity, else the polled one)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from temporalio.testing import ActivityEnvironment

from tempoconf.activities.health import HealthCheckActivities
from tempoconf.rollout.activity_io import CheckHealthInput
from tempoconf.rollout.plan import PlannedStage, RolloutPlan, plan_check
from tempoconf.store.records import SeenClient
from tempoconf.store.store import Store

PATH = "myproject/server_config"
NEW = "aaaaaaaaaaaaaaaa"
OLD = "bbbbbbbbbbbbbbbb"
CHECK = {"kind": "reports", "max_error_ratio": 0.1, "min_clients": 1, "window": "1h"}
PLAN = RolloutPlan(
    namespace="default",
    path=PATH,
    version=NEW,
    stages=[
        PlannedStage(
            index=0, name="channel:canary", channel="canary", health=[plan_check(CHECK, 0)]
        ),
        PlannedStage(
            index=1, name="labels:region=eu", labels={"region": "eu"}, health=[plan_check(CHECK, 0)]
        ),
    ],
)


async def check(store: Store, stage: int, published_at: datetime | None) -> dict[str, object]:
    report = await ActivityEnvironment().run(
        HealthCheckActivities(store).check_stage_health,
        CheckHealthInput(
            plan=PLAN,
            stage=PLAN.stages[stage],
            final=False,
            published_at=published_at.isoformat() if published_at else None,
        ),
    )
    [result] = report.checks
    return {"verdict": result.verdict, "summary": result.summary, **result.figures}


async def test_evidence_starts_at_the_publish(store: Store) -> None:
    published = datetime.now(UTC) - timedelta(minutes=2)
    store.add_report(
        "default",
        PATH,
        client="canary-1",
        version=NEW,
        ok=0,
        failed=100,
        channel="canary",
        received_at=published - timedelta(microseconds=1),
    )
    store.add_report(
        "default",
        PATH,
        client="canary-2",
        version=NEW,
        ok=99,
        failed=1,
        channel="canary",
        received_at=published,
    )

    judged = await check(store, 0, published)
    assert (judged["verdict"], judged["clients"], judged["failed"]) == ("healthy", 1, 1)
    assert judged["since"] == published.isoformat(timespec="seconds")
    # Without a publish time (an input from an older workflow), the window alone bounds it.
    assert (await check(store, 0, None))["verdict"] == "unhealthy"


async def test_the_cohort_of_stage_k_is_stages_1_to_k(store: Store) -> None:
    published = datetime.now(UTC) - timedelta(minutes=2)
    now = datetime.now(UTC)
    store.record_seen_clients(
        "default", PATH, [SeenClient("eu-polled", None, {"region": "eu"}, now)]
    )
    store.add_report(
        "default", PATH, client="canary-1", version=NEW, ok=100, failed=0, channel="canary"
    )
    store.add_report(
        "default", PATH, client="eu-polled", version=NEW, ok=0, failed=100
    )  # names no identity
    store.add_report(
        "default", PATH, client="us-1", version=NEW, ok=0, failed=100, labels={"region": "us"}
    )
    store.add_report(
        "default", PATH, client="us-2", version=OLD, ok=0, failed=100, labels={"region": "us"}
    )

    canary = await check(store, 0, published)
    assert (canary["verdict"], canary["clients"], canary["left_out_clients"]) == ("healthy", 1, 2)
    assert "evidence: 1 cohort client(s) since " in str(canary["summary"])
    assert "; 2 report(s) from 2 client(s) outside the cohort left out" in str(canary["summary"])

    widened = await check(store, 1, published)
    assert (widened["verdict"], widened["clients"], widened["failed"]) == ("unhealthy", 2, 100)
    assert widened["left_out_clients"] == 1
