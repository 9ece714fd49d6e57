"""The names tempoconf gives things in Temporal: the workflow type, task queue, search
attributes and workflow ids."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tempoconf.rollout.changesets import changeset_workflow_id

if TYPE_CHECKING:  # not at run time: this module stays light (no pydantic models imported)
    from collections.abc import Sequence

    from temporalio.client import Client
    from temporalio.common import SearchAttributeKey

    from tempoconf.rollout.request import RolloutRequest

    PATH_ATTRIBUTE: SearchAttributeKey[str]
    VERSION_ATTRIBUTE: SearchAttributeKey[str]
    STAGE_ATTRIBUTE: SearchAttributeKey[str]
    STATE_ATTRIBUTE: SearchAttributeKey[str]
    PATHS_ATTRIBUTE: SearchAttributeKey[Sequence[str]]
    SEARCH_ATTRIBUTES: tuple[SearchAttributeKey[Any], ...]

__all__ = [
    "WORKFLOW_TYPE",
    "DEFAULT_TASK_QUEUE",
    "FREEZE_ENDED_SIGNAL",
    "SEARCH_ATTRIBUTES",
    "SEARCH_ATTRIBUTE_TYPES",
    "PATH_ATTRIBUTE",
    "PATHS_ATTRIBUTE",
    "PATHS_ATTRIBUTE_NAME",
    "VERSION_ATTRIBUTE",
    "STAGE_ATTRIBUTE",
    "STATE_ATTRIBUTE",
    "registered_search_attributes",
    "rollout_workflow_id",
    "search_attribute_arguments",
    "request_workflow_id",
    "workflow_id_problem",
]

WORKFLOW_TYPE = "ConfigRollout"
DEFAULT_TASK_QUEUE = "tempoconf"
FREEZE_ENDED_SIGNAL = "freeze_ended"
"""Sent to the rollouts waiting on a freeze when one ends (tempoconf.temporal.freeze_wakeup): they look
again at once instead of at their next look (every 30 s). Its argument: the namespace whose
freeze ended, for the history's reader."""

_SEARCH_ATTRIBUTE_NAMES = {
    "PATH_ATTRIBUTE": "TempoconfPath",
    "VERSION_ATTRIBUTE": "TempoconfVersion",
    "STAGE_ATTRIBUTE": "TempoconfStage",
    "STATE_ATTRIBUTE": "TempoconfState",
    "PATHS_ATTRIBUTE": "TempoconfPaths",
}
PATHS_ATTRIBUTE_NAME = "TempoconfPaths"
"""Every config path of a rollout ([path] for one config): a changeset is found by any of its
configs (`TempoconfPaths="myproject/backend"`). Newer than the others: the workflow upserts it only
where the worker found it registered (RolloutPlan.paths_attribute)."""
SEARCH_ATTRIBUTE_TYPES = {
    "TempoconfPath": "Keyword",
    "TempoconfVersion": "Keyword",
    "TempoconfStage": "Keyword",
    "TempoconfState": "Keyword",
    PATHS_ATTRIBUTE_NAME: "KeywordList",
}
"""Every search attribute the workflow upserts and its type, as `temporal operator
search-attribute create --type` and `temporal server start-dev --search-attribute` spell it."""


def search_attribute_arguments() -> list[str]:
    """`--search-attribute NAME=TYPE` for each attribute, for `temporal server start-dev`."""
    return [
        argument
        for name, kind in SEARCH_ATTRIBUTE_TYPES.items()
        for argument in ("--search-attribute", f"{name}={kind}")
    ]


async def registered_search_attributes(client: Client, namespace: str) -> frozenset[str]:
    """The custom search attributes registered in `namespace` (RPCError when the cluster does not
    say, e.g. without operator rights)."""
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    answer = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    return frozenset(answer.custom_attributes)


def __getattr__(name: str) -> Any:
    """The search attribute keys, made on first use (PEP 562): the keys need the Temporal SDK,
    which a command that never talks to Temporal (the CLI in API mode) should not load."""
    if name == "SEARCH_ATTRIBUTES":
        value: Any = tuple(__getattr__(key) for key in _SEARCH_ATTRIBUTE_NAMES)
    elif name in _SEARCH_ATTRIBUTE_NAMES:
        from temporalio.common import SearchAttributeKey

        attribute = _SEARCH_ATTRIBUTE_NAMES[name]
        value = (
            SearchAttributeKey.for_keyword_list(attribute)
            if SEARCH_ATTRIBUTE_TYPES[attribute] == "KeywordList"
            else SearchAttributeKey.for_keyword(attribute)
        )
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # made once: later reads find it without this function
    return value


def rollout_workflow_id(namespace: str, path: str) -> str:
    """The workflow id the tempoconf CLI uses (the engine takes any id; the admin API and the
    tempoconf CLI only a request's own: `workflow_id_problem`)."""
    return f"rollout:{namespace}/{path}"


def request_workflow_id(request: RolloutRequest) -> str:
    """The workflow id the tempoconf CLI and the admin API give a request: a single config's
    `rollout:{namespace}/{path}`, a changeset's `changeset:<changeset_id>` (tempoconf.rollout.changesets)."""
    if request.changes is not None:
        return changeset_workflow_id(
            (request.change_namespace(change), change.path) for change in request.changes
        )
    return rollout_workflow_id(request.namespace, request.path)


_SUFFIX = re.compile(r"[A-Za-z0-9._-]{1,64}")


def workflow_id_problem(request: RolloutRequest, workflow_id: str) -> str | None:
    """Why `workflow_id` is not one `request` may start under; None: it may. A request's ids are
    its own (`request_workflow_id`), and that id followed by `:` and a suffix of 1-64 letters,
    digits, `.`, `_` or `-` (`rollout:team-a/app/config:hotfix-7`): so no request takes an id
    that another config's rollout (another team's) is started under. A config path and a
    namespace hold no `:`, so no config's ids are another's."""
    own = request_workflow_id(request)
    if workflow_id == own:
        return None
    head, colon, suffix = workflow_id.partition(own + ":")
    if not head and colon and _SUFFIX.fullmatch(suffix):
        return None
    return (
        f"workflow id {workflow_id!r} is not one of this request's: {own!r}, or {own!r} "
        "followed by ':' and a suffix of 1-64 letters, digits, '.', '_' or '-'"
    )
