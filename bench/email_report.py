"""The e-mail bench's results file (bench/RESULTS-email.md), from the figures of the passes just run."""

from __future__ import annotations

import argparse
import statistics

from bench import report
from bench.common import Phase
from bench.herald_run import CALLBACK_CONCURRENCY, ReceiptsResult


def _actions(p: Phase) -> float | None:
    return p.per_intent(sum(p.actions.values())) if p.actions else None


def _cpu(p: Phase) -> float | None:
    return sum(p.cpu_ms_per_intent.values()) if p.completed else None


# What every pass states as Herald/floor; the rounds' lines add actions to the SMS bench's four.
RATIOS = [("intents/s", lambda p: p.throughput), ("CPU per intent", _cpu), ("billable actions per intent", _actions)]
ROUND_MEASURES = [*report.ROUND_MEASURES, ("billable actions/intent", _actions)]


def _ratios(label: str, pooled: dict[str, Phase], rounds: dict[str, list[Phase]], unit: str = "intent") -> str:
    """One pass's Herald/floor for intents/s, CPU and actions per intent; with rounds, their median and range."""
    parts = []
    for name, getter in RATIOS:
        ratio = report._quotient(getter(pooled["herald"]), getter(pooled["floor"]))
        each = sorted(
            r
            for r in (
                report._quotient(getter(h), getter(f)) for h, f in zip(rounds["herald"], rounds["floor"], strict=True)
            )
            if r is not None
        )
        spread = (
            f" (rounds: median {statistics.median(each):.2f}×, range {each[0]:.2f}–{each[-1]:.2f}×)"
            if len(each) > 1
            else ""
        )
        parts.append(f"{name.replace('intent', unit)} **{report._times(ratio)}**{spread}")
    return f"- {label}: Herald/floor " + "; ".join(parts)


def _receipt_ratios(out: dict) -> str | None:
    """The report path's Herald/floor: events applied per second, CPU per event, actions per parked intent."""
    herald, floor = out["receipts"], out["floor_receipts"]
    if herald is None or floor is None:
        return None
    actions = out["receipt_actions"]

    def cpu(r: ReceiptsResult) -> float:
        return sum(r.cpu.values()) / r.reports

    return (
        f"- report path: Herald/floor events applied/s **{report._ratio(herald.applied_rate, floor.applied_rate)}**"
        f" (answered 2xx/s {report._ratio(herald.ingest_rate, floor.ingest_rate)}); CPU per event"
        f" **{report._ratio(cpu(herald), cpu(floor))}**; billable actions per parked intent"
        f" **{report._ratio(actions.get('herald'), actions.get('floor'))}**"
        f" ({report._num(actions.get('herald'), 2)} vs {report._num(actions.get('floor'), 2)}, its whole life); one round"
    )


def _passes_section(pooled: dict, rounds: dict, latency_rate: float, unit: str) -> list[str]:
    """The table, the details and the rounds' ratios of one set of passes (side by side, or notices)."""
    lines = [
        report.main_table(pooled["throughput"], pooled.get("latency"), latency_rate),
        "",
        *report.details(pooled["throughput"], pooled.get("latency")),
        *(line for name, by_round in rounds.items() for line in report.round_ratios(name, by_round, ROUND_MEASURES)),
    ]
    return [_per_notice(line) for line in lines] if unit == "notice" else lines


def _per_notice(line: str) -> str:
    """The SMS bench's wording per intent, said per notice (each Phase of the notice pass counts notices)."""
    for intent, notice in (("intents completed", "notices completed"), ("intents/s", "notices/s"),
                           ("/intent", "/notice"), ("/s offered", " notices/s offered")):  # fmt: skip
        line = line.replace(intent, notice)
    return line


def side_by_side(args: argparse.Namespace, out: dict) -> list[str]:
    if not out["throughput"]:
        return ["Not run (`--intents 0`)."]
    rounds = f", in each of {args.rounds} rounds (variants in alternating order; figures pool the rounds)"
    return [
        f"{args.intents} e-mail intents per variant and pass{rounds if args.rounds > 1 else ''}; ESP emulator step"
        f" {args.step_ms} ms (`processed` {args.step_ms} ms after acceptance, `delivered` {2 * args.step_ms} ms, the"
        " same for all three).",
        "",
        *_passes_section(out, out["rounds"], args.latency_rate, "intent"),
        "",
        "How each figure is taken (as the SMS bench's, bench/RESULTS.md, but for what follows):",
        "",
        "- *naive*: the driver hands each message to the bench's ESP in one SMTP transaction (16 at a time), its"
        " unique args naming the intent; `bench/receiver.py` verifies the signature of each SendGrid event post, drops"
        " `processed` and inserts one row on `delivered`. *floor*: start → submit activity (one SMTP transaction,"
        " unique args naming the workflow) → one signal (the receiver, on `delivered`) → insert activity. *Herald*:"
        " `HeraldClient.send` on the e-mail channel → worker → SMTP adapter → the stack's ESP → both events through"
        " Herald's receipt server (`/sendgrid/events`: signature, inbox, commit, 2xx, signal) → ledger.",
        "- the emulator column is the ESP emulator: the bench's own for naive and the floor, the stack's for Herald"
        " (one process each, same settings).",
    ]


def receipts_section(args: argparse.Namespace, out: dict) -> list[str]:
    herald, floor = out["receipts"], out["floor_receipts"]
    if herald is None:
        return ["Not run (`--receipts 0`)."]
    lines = [
        "### Herald",
        "",
        *report.receipt_lines(
            herald,
            parked=f"{herald.reports} e-mail intents parked (ESP fault `no_events`: accepted, never an event), then the"
            f" bench, playing SendGrid, posted one signed `delivered` event per message (a JSON array of one, as the"
            f" ESP posts them), {CALLBACK_CONCURRENCY} connections at a time",
            ingested="signature and age checked, stored in the inbox, committed, answered 2xx",
            applied="signal → workflow → verdict written to the ledger",
        ),
        f"- final states: {dict(herald.states)}",
        *report.burst_lines(herald),
    ]
    if floor is not None:
        lines += [
            "",
            "### The floor, same events",
            "",
            *report.receipt_lines(
                floor,
                parked=f"{floor.reports} floor e-mail workflows parked waiting for their signal (same `no_events` fault)",
                ingested="signature checked by the floor's receiver, signalled, answered 2xx",
                applied="signal → workflow → insert activity ran",
            ),
        ]
    return lines


def notice_section(args: argparse.Namespace, out: dict) -> list[str]:
    if not out["notice"]:
        return ["Not run (add `--notice`)."]
    return [
        f"{args.intents} notices per variant and pass, each one SMS and one e-mail (the order receipt's two"
        " templates); Herald: `HeraldClient.send_notice` (one intent per channel under one key); the floor: two floor"
        " workflows started one after the other, one on each queue. A notice is complete when both channels"
        " completed, at the later close; CPU and actions are both channels'. Naive is not run in this pass.",
        "",
        *_passes_section(out["notice"], out["notice_rounds"], args.latency_rate / 2, "notice"),
    ]


def ratios_section(args: argparse.Namespace, out: dict) -> list[str]:
    lines = [
        _ratios(f"{name} pass", out[name], out["rounds"][name]) for name in ("throughput", "latency") if out.get(name)
    ]
    lines.append(_receipt_ratios(out) or "- report path: not run")
    if out["notice"]:
        lines += [
            _ratios(f"notice {name} pass", out["notice"][name], out["notice_rounds"][name], unit="notice")
            for name in out["notice"]
        ]
    return lines


def render_email(args: argparse.Namespace, make_command: str, load_before: str, load_after: str, out: dict) -> str:
    lines = [
        "# Herald benchmark results: e-mail",
        "",
        f"Generated by `{make_command}` on {report.now()}. Every figure below comes from that one run; rerun the"
        " command to reproduce them. The SMS figures are in bench/RESULTS.md.",
        "",
        "## Machine",
        "",
        *report.machine(),
        f"- 1-minute load average: {load_before} when the run started, {load_after} when it ended",
        "",
        "## Herald/floor, every pass",
        "",
        *ratios_section(args, out),
        "",
        "## E-mail side by side",
        "",
        *side_by_side(args, out),
        "",
        "## E-mail report path (signed event post → inbox → signal)",
        "",
        *receipts_section(args, out),
        "",
        "## Two-channel notices (SMS + e-mail)",
        "",
        *notice_section(args, out),
    ]
    return "\n".join(lines)
