"""A notice as an operator reads it: each channel's record side by side, in one plain-text table.

Seed 003's question is "what happened to this notice on each channel, and why": the event id, the
content revision, the destination (fingerprinted), the attempts with their delays and outcomes,
and the transitions in order. Channels never share a row: each column is its own intent.
"""

from __future__ import annotations

import textwrap
from itertools import zip_longest

from herald.core.contracts import IntentStatus

_LABEL = 14
_COLUMN = 58


def render_notice(business_key: str, intents: dict[str, IntentStatus | None]) -> str:
    """The side-by-side view of one notice's intents (a channel with no intent shows as such)."""
    channels = list(intents)
    columns = [_column(intents[channel]) for channel in channels]
    lines = [f"notice {business_key}", _row("", channels), _row("", ["-" * (_COLUMN - 2)] * len(channels))]
    labels = sorted({label for column in columns for label, _ in column}, key=_label_order(columns))
    for label in labels:
        cells = [[text for name, text in column if name == label] for column in columns]
        for index, parts in enumerate(zip_longest(*cells, fillvalue="")):
            lines.append(_row(label if index == 0 else "", list(parts)))
    return "\n".join(line.rstrip() for line in lines)


def _column(status: IntentStatus | None) -> list[tuple[str, str]]:
    if status is None:
        return [("intent", "(none on this channel)")]
    rows = [
        ("intent", status.workflow_id),
        ("state", status.state.value + (f" ({status.closed_by})" if status.closed_by else "")),
        ("template", f"{status.template_id} v{status.template_version}"),
        ("content", status.content_sha256[:16]),
        ("destination", status.destination_fingerprint or "-"),
        ("tenant", status.tenant),
    ]
    for attempt in status.attempts:
        outcome = attempt.provider_status.value if attempt.provider_status else "-"
        submit = attempt.submit_result.value if attempt.submit_result else "in flight"
        delay = f", retry after {attempt.retry_delay_seconds:.1f}s" if attempt.retry_delay_seconds else ""
        rows.append(("attempts", f"{attempt.number} {attempt.started_at:%H:%M:%S} {submit} -> {outcome}{delay}"))
        if attempt.provider:
            rows.append(("attempts", f"  via {attempt.provider}"))
        if attempt.priority is not None:
            # Where its submit stood in the route's queue (the key granted, the tenant's weight).
            weight = f", weight {attempt.fairness_weight:g}" if attempt.fairness_weight is not None else ""
            rows.append(("attempts", f"  priority {attempt.priority}{weight}"))
        if attempt.waiting:
            # Why it still waits (an e-mail's silent event stream): the whole reason, wrapped to the column.
            rows += [("attempts", f"  {line}") for line in textwrap.wrap(attempt.waiting, _COLUMN - 4)]
    for transition in status.transitions:
        rows.append(
            ("transitions", f"{transition.at:%H:%M:%S} {transition.to_state.value} [{transition.source.value}]")
        )
    return rows


def _label_order(columns: list[list[tuple[str, str]]]):  # type: ignore[no-untyped-def]
    order: list[str] = []
    for column in columns:
        for label, _ in column:
            if label not in order:
                order.append(label)
    return order.index


def _row(label: str, cells: list[str]) -> str:
    return f"{label:<{_LABEL}}" + "".join(f"{cell[: _COLUMN - 2]:<{_COLUMN}}" for cell in cells)
