"""A changeset meets the stage gates as one rollout: a freeze of any of its namespaces holds all of
its configs, and its gate on applied versions is met only once every config's is."""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.testing import ActivityEnvironment

from tempoconf.activities.applied import AppliedGateActivities
from tempoconf.canonical import version_id
from tempoconf.gates.applied_gate import AppliedGate
from tempoconf.resolution import STABLE, ClientIdentity, resolve
from tempoconf.rollout.activity_io import CheckAppliedInput, GatedConfig
from tempoconf.rollout.changesets import changeset_key, changeset_workflow_id
from tempoconf.rollout.plan import PlannedStage
from tempoconf.store.records import AppliedReport, SeenClient
from tempoconf.store.store import Store
from tests.fixtures.temporal import RolloutHarness, rollout_result
from tests.store.helpers import snapshot_of
from tests.workflows.test_rollout import NAMESPACE, unique_path, wait_for_state
from tests.workflows.test_windows_freezes import fast_freeze_harness  # noqa: F401 (a fixture)

OTHER_NAMESPACE = "other-team"


def served(store: Store, namespace: str, path: str, channel: str | None = None) -> tuple[str, str]:
    """(version, stage) a client of this channel resolves to right now."""
    snapshot = snapshot_of(store, namespace, path)
    assert snapshot is not None, f"{namespace}/{path} is unknown to the store"
    resolution = resolve(snapshot, ClientIdentity("host", channel, {}), datetime.now(UTC))
    assert resolution is not None
    return resolution.record.version, resolution.stage


async def test_a_freeze_of_one_namespace_holds_every_config_of_the_changeset(
    fast_freeze_harness: RolloutHarness,  # noqa: F811 (the fixture imported above)
) -> None:
    harness = fast_freeze_harness
    store = harness.store
    configs = [(NAMESPACE, unique_path()), (OTHER_NAMESPACE, unique_path())]
    stables = []
    for namespace, path in configs:
        handle = await harness.start({"path": path, "namespace": namespace, "value": {"v": 1}})
        assert (await rollout_result(handle))["outcome"] == "promoted"
        stables.append(version_id({"v": 1}))
    store.start_freeze(OTHER_NAMESPACE, reason="their release train", by="other-oncall")

    handle = await harness.start(
        {
            "namespace": NAMESPACE,
            "changes": [
                {"namespace": namespace, "path": path, "value": {"v": 2}}
                for namespace, path in configs
            ],
            "stages": [{"channel": "canary", "cooldown": "1s"}],
            "author": "alice",
        },
        real_clock=True,
        workflow_id=changeset_workflow_id(configs),
    )
    # Only the second config's namespace is frozen, yet neither config's canary is published.
    progress = await wait_for_state(handle, "frozen", stage_index=0)
    assert f"namespace {OTHER_NAMESPACE} frozen by other-oncall" in progress["phase"]
    for (namespace, path), stable in zip(configs, stables, strict=True):
        assert served(store, namespace, path, "canary") == (stable, STABLE)

    store.end_freeze(OTHER_NAMESPACE, by="other-oncall", reason="train left")
    result = await rollout_result(handle)
    assert result["outcome"] == "promoted"
    for namespace, path in configs:
        assert served(store, namespace, path)[0] == version_id({"v": 2})


async def test_a_changesets_applied_gate_is_its_least_applied_config(store: Store) -> None:
    first, second = unique_path(), unique_path()
    versions = {first: "a" * 16, second: "b" * 16}
    now = store.now()
    clients = [f"host-{number}" for number in range(4)]
    for path in (first, second):
        store.record_seen_clients(
            NAMESPACE,
            path,
            [SeenClient(client, "canary", {}, now, versions[path]) for client in clients],
        )
    # Every client applied the first config's value; one of them not the second's.
    store.record_applied(
        NAMESPACE, first, [AppliedReport(client, versions[first], now) for client in clients]
    )
    store.record_applied(
        NAMESPACE,
        second,
        [AppliedReport(client, versions[second], now) for client in clients[:3]]
        + [AppliedReport(clients[3], versions[second], now, error="reload failed")],
    )
    stage = PlannedStage(index=0, name="canary", channel="canary", min_applied=1.0)
    key = changeset_key([(NAMESPACE, first), (NAMESPACE, second)])

    async def judge(configs: list[tuple[str, str]]) -> AppliedGate:
        gate: AppliedGate = await ActivityEnvironment().run(
            AppliedGateActivities(store).check_stage_applied,
            CheckAppliedInput(
                namespace=NAMESPACE,
                path=configs[0][0],
                version=configs[0][1],
                stage=stage,
                configs=[GatedConfig(NAMESPACE, path, version) for path, version in configs],
                bucket_key=key,
            ),
        )
        return gate

    alone = await judge([(first, versions[first])])
    assert alone.met and alone.applied == 4
    both = await judge([(first, versions[first]), (second, versions[second])])
    assert not both.met
    assert (both.version, both.applied, both.cohort) == (versions[second], 3, 4)
    assert [straggler.client for straggler in both.stragglers] == [clients[3]]
    assert both.stragglers[0].error == "reload failed"
    # Listed the other way round, the verdict is the same.
    swapped = await judge([(second, versions[second]), (first, versions[first])])
    assert (swapped.met, swapped.version, swapped.applied) == (False, versions[second], 3)
