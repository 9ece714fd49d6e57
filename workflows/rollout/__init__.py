"""`ConfigRollout`: one staged configuration rollout as a durable state machine.

prepare → for each stage: publish → hold (durable timer, leases renewed; the interval checks run
beside it in one activity) → check health → [approval] → promote. Halt, an unhealthy check or
cancellation run the compensating revert. Deterministic code only: every side effect is an
activity, referred to by name.

A run's history stays bounded: a stage costs a fixed number of events whatever its hold's length
or its checks' interval, and what still grows (lease renewals over weeks, operator commands, many
stages) is cut by continue-as-new, which carries the whole `RolloutRunState` to the next run.

The package's private modules, one concern each, act on the `RolloutRun` the workflow holds:

- `_workflow`: the `ConfigRollout` class, its run loop and its handlers;
- `_commands`: the operator commands' signals and updates, made from tempoconf.rollout.commands;
- `_inputs`: what a start must give it;
- `_gates`: change windows and namespace freezes, before each publish and the promote;
- `_hold`: a stage's publish and hold, with the interval health watch;
- `_applied_gate`: the gate on the share of a cohort that applied the version;
- `_checks`: the end-of-hold health checks;
- `_approval`: a manual stage's approval;
- `_waiting`: waiting (leases renewed meanwhile) and continue-as-new;
- `_ending`: promote, revert, and how the workflow ends;
- `_audit`: transitions, the Web UI's details, search attributes, the audit log;
- `_notify`: webhooks;
- `_activities`: every activity, typed, with its options;
- `_run`: `RolloutRun`, the state they share;
- `_patches`: every `workflow.patched` id.
"""

from __future__ import annotations

from tempoconf.workflows.rollout._workflow import ConfigRollout

__all__ = ["ConfigRollout"]
