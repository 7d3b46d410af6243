"""The backlog pass's section of the bench's output: priority classes, tenants, the route and its targets."""

from __future__ import annotations

from bench.measure import MACHINE
from bench.backlog import (
    ARMS,
    CLASSES,
    FLAT_PRIORITY,
    SHARE_429_TARGET,
    SLICE_SECONDS,
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
from bench.common import UNLIMITED_CONCURRENCY, percentile
from bench.report import _num, _quotient, _ratio, _times
from herald.core.send_policy import BUILT_IN_PRIORITY


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
        "- The route's worker: " + "; ".join(f"a process polling `{queues}`" for _, queues in r.workers)
        + " (HERALD_WORKER_QUEUES). "
        + (
            "In arm on the urgent intents' workflows run on the route's urgent lane (priority 1,"
            " herald/temporal/task_queues.py); in arm off nothing has priority 1, so every workflow runs on the"
            " standard queue."
            if r.urgent_lane
            else "The urgent lane is off (`--no-urgent-lane`, as HERALD_URGENT_LANE=0): every workflow runs on the"
            " standard queue."
        ),
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


def _slices(counts: list[int], limit: float) -> str:
    """The span's pace slice by slice (the last, partial slice left out): the start, then the steady state."""
    whole = [c / (limit * SLICE_SECONDS) for c in counts[:-1]]
    if not whole:
        return "-"
    rest = sorted(whole[6:])
    tail = f"; rest {rest[len(rest) // 2]:.2f} ({len(rest)} slices)" if rest else ""
    return " ".join(f"{w:.2f}" for w in whole[:6]) + tail


def _slice_cores(slices: list[dict[str, float]]) -> str:
    """Each slice's CPU as "Temporal/workers/PostgreSQL/driver/machine" cores."""

    def one(cores: dict[str, float]) -> str:
        workers = sum(v for k, v in cores.items() if k.startswith("worker"))
        parts = (
            cores.get("temporal", 0.0),
            workers,
            cores.get("postgres", 0.0),
            cores.get("driver", 0.0),
            cores.get(MACHINE, 0.0),
        )
        return "/".join(f"{v:.2f}" for v in parts)

    return "; ".join(one(c) for c in slices) or "-"


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
        f"acceptances per {SLICE_SECONDS:g} s of that span ÷ L·{SLICE_SECONDS:g} s, first six, then the rest's median",
        lambda a: _slices(a.slice_counts, r.limit),
    )
    row(
        f"CPU in cores per {SLICE_SECONDS:g} s from the batch's start, first six: Temporal / workers / PostgreSQL / driver / machine",
        lambda a: _slice_cores(a.slice_cores),
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
