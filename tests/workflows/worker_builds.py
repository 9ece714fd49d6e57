"""A build of the worker from before issue 41's approval forms: `ConfigRollout` that decides no
form after prepare, so its runs record neither the `approvals-bound-to-run-and-stage` nor the
`four-eyes-normalised-identities` marker, as the worker before them did. A run it starts is a run
"started before" for the worker of today, which replays it without those markers. Its own
module: the workflow sandbox imports it."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from tempoconf.temporal.names import WORKFLOW_TYPE
    from tempoconf.workflows.rollout import ConfigRollout


@workflow.defn(name=WORKFLOW_TYPE)
class ConfigRolloutBeforeApprovalForms(ConfigRollout):
    """The worker before: approvals signed over identity, workflow, command and digest, and four
    eyes comparing free text."""

    @workflow.run
    async def run(self, *inputs: Any) -> Any:
        return await super().run(*inputs)

    def _approval_forms(self) -> None:
        pass
