"""`tempoconf trace FILE...`: the traces of rollouts, read from what processes traced with
`OTEL_TRACES_EXPORTER=console` wrote, printed as indented trees (docs/how-to/tracing.md). The
console exporter writes each span as an indented JSON object to standard output, between whatever
else the process prints; everything that is not a span is skipped."""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tempoconf.cli._common import die

__all__ = ["Span", "read_spans", "render_trace", "rollout_traces", "trace_command"]

# Where a span object starts in the exporter's output: `{` alone on a line, then its name.
_SPAN_START = re.compile(r'^\{\n\s+"name": ', re.M)
_RUN_WORKFLOW = "RunWorkflow:"


@dataclass(eq=False)  # a span is itself: compared by identity
class Span:
    """One exported span, as much of it as a tree shows."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    start: datetime
    end: datetime
    service: str
    attributes: dict[str, Any]
    error: str | None
    children: list[Span] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def _span(data: dict[str, Any]) -> Span | None:
    try:
        context = data["context"]
        status = data.get("status") or {}
        return Span(
            name=str(data["name"]),
            trace_id=str(context["trace_id"]),
            span_id=str(context["span_id"]),
            parent_id=data.get("parent_id"),
            start=datetime.fromisoformat(data["start_time"]),
            end=datetime.fromisoformat(data["end_time"]),
            service=str(
                ((data.get("resource") or {}).get("attributes") or {}).get("service.name", "")
            ),
            attributes=dict(data.get("attributes") or {}),
            error=(status.get("description") or "error")
            if status.get("status_code") == "ERROR"
            else None,
        )
    except (KeyError, TypeError, ValueError):
        return None  # JSON that is no span


def read_spans(text: str) -> list[Span]:
    """The spans in a console exporter's output, in the order written."""
    decoder = json.JSONDecoder()
    spans = []
    for match in _SPAN_START.finditer(text):
        try:
            data, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue  # cut short (the process was killed while writing it)
        span = _span(data) if isinstance(data, dict) else None
        if span is not None:
            spans.append(span)
    return spans


def rollout_traces(spans: list[Span], workflow_id: str | None = None) -> list[list[Span]]:
    """The roots of each trace that holds a rollout's run (a `RunWorkflow:` span, of
    `workflow_id` if given), earliest first; a span whose parent is in no file is a root too."""
    by_trace: dict[str, dict[str, Span]] = defaultdict(dict)
    for span in spans:
        by_trace[span.trace_id].setdefault(span.span_id, span)
    traces = []
    for members in by_trace.values():
        runs = [
            span
            for span in members.values()
            if span.name.startswith(_RUN_WORKFLOW)
            and (workflow_id is None or span.attributes.get("temporalWorkflowID") == workflow_id)
        ]
        if not runs:
            continue
        roots: list[Span] = []
        for span in members.values():
            span.children = []
        for span in sorted(members.values(), key=lambda s: (s.start, s.end)):
            parent = members.get(span.parent_id) if span.parent_id else None
            (parent.children if parent is not None else roots).append(span)
        traces.append(roots)
    return sorted(traces, key=lambda roots: roots[0].start)


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.1f}s"


def _label(span: Span, parent_service: str | None) -> str:
    label = span.name
    stage = span.attributes.get("tempoconf.stage")
    if stage is not None:
        label += f" {stage}"
    if span.service != parent_service:
        label += f"  [{span.service}]"
    return label


def _statements(spans: list[Span]) -> str:
    """One line for a span's SQL statements: `8 statements: SELECT ×5, INSERT ×2, UPDATE`."""
    kinds: dict[str, int] = {}
    for span in spans:
        kinds[span.name] = kinds.get(span.name, 0) + 1
    listed = ", ".join(f"{kind} ×{count}" if count > 1 else kind for kind, count in kinds.items())
    return f"{len(spans)} statement{'s' if len(spans) > 1 else ''}: {listed}"


def render_trace(roots: list[Span]) -> list[str]:
    """A trace as lines of an indented tree: name (and a step's stage), `[service]` where it
    changes, duration, and what failed. A span's SQL statements (store spans) share one line,
    where the first of them ran: how many of each kind, and their total time."""
    lines: list[str] = []

    def line(label: str, seconds: float, error: str | None) -> str:
        return f"{label}  {_duration(seconds)}" + (f"  error: {error}" if error else "")

    def walk(spans: list[Span], prefix: str, parent_service: str | None) -> None:
        statements = [s for s in spans if "db.system.name" in s.attributes and not s.children]
        shown: list[Span | list[Span]] = []
        for span in spans:
            if span not in statements:
                shown.append(span)
            elif span is statements[0]:
                shown.append(statements)
        for position, item in enumerate(shown):
            branch, indent = ("└─ ", "   ") if position == len(shown) - 1 else ("├─ ", "│  ")
            if isinstance(item, list):
                failed = next((s.error for s in item if s.error), None)
                seconds = sum(s.seconds for s in item)
                lines.append(prefix + branch + line(_statements(item), seconds, failed))
                continue
            label = _label(item, parent_service)
            lines.append(prefix + branch + line(label, item.seconds, item.error))
            walk(item.children, prefix + indent, item.service)

    for root in roots:
        lines.append(line(_label(root, None), root.seconds, root.error))
        walk(root.children, "", root.service)
    return lines


def trace_command(args: argparse.Namespace) -> int:
    spans: list[Span] = []
    for name in args.files:
        try:
            spans += read_spans(Path(name).read_text(encoding="utf-8", errors="replace"))
        except OSError as error:
            die(f"cannot read {name}: {error.strerror or error}", exit_code=2)
    traces = rollout_traces(spans, args.workflow_id)
    if not traces:
        which = f" of workflow {args.workflow_id}" if args.workflow_id else ""
        die(
            f"no rollout trace{which} in {', '.join(args.files)} ({len(spans)} span(s) read): "
            "give the output of processes run with OTEL_TRACES_EXPORTER=console, the worker's "
            "among them"
        )
    for index, roots in enumerate(traces):
        if index:
            print()
        print("\n".join(render_trace(roots)))
    return 0
