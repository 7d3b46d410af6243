"""Herald's benchmark: `make bench [ARGS="..."]` or `python -m bench [options]`.

One run starts its own stack on free ports (Temporal dev server in memory, a fresh embedded
PostgreSQL, the emulator, Herald's receipt server and worker, the floor's worker and receipt
handler) and measures, on that one machine and that one Temporal server:

  naive   the same HTTP call and insert with no Temporal          (bench/naive.py)
  floor   a minimal workflow of the same shape, no Herald logic    (bench/floor.py)
  Herald  real intents through the real client, worker, receipt server and ledger

first with intents offered as fast as the driver can (throughput, CPU, actions), then at
--latency-rate intents/s (latency); then the report path alone (--receipts), a burst
against a rate-limited emulator (--rate-limit), priority and tenants on a backlogged route, on
and off (--backlog, bench/backlog.py) and parked intents (--parked). It prints one table and
writes bench/RESULTS.md. It is a benchmark, not a test: nothing here passes or fails.

`--channel email` measures the same three variants on the e-mail channel against the ESP emulator
(bench/email_bench.py: side by side and the report path), and `--notice` adds the two-channel
notice pass; those figures go to bench/RESULTS-email.md.

Each pass can be skipped (--intents 0 skips the side-by-side passes and, by default, the report
path); a run without the side-by-side passes writes only to a --results file it is given, never
over bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from pathlib import Path

from bench import backlog_report, report
from bench.backlog import run_backlog
from bench.context import Bench
from bench.email_bench import EMAIL_RESULTS, measure_email
from bench.email_report import render_email
from bench.floor_receipts import run_floor_receipts
from bench.floor_run import run_floor
from bench.herald_run import run_herald, run_parked, run_rate_limited, run_receipts
from bench.naive import run_naive
from bench.passes import WARMUP_INTENTS, pass_rates, run_passes
from bench.scale_out import ScaleOut, run_scale_out
from bench.scale_out import render as render_scale_out
from bench.stack import BenchStack

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SCALE_OUT_RESULTS = Path(__file__).resolve().parent / "RESULTS-scale-out.md"
RUNNERS = {"naive": run_naive, "floor": run_floor, "herald": run_herald}
# The limited worker's HERALD_SUBMIT_RATE_LIMIT as a fraction of the emulator's limit L. Temporal's
# matcher lets rate + 1 tasks out at once after a quiet spell (a GCRA with a one-second burst); the
# emulator's bucket holds L. The submit activity spaces its calls 1/rate apart (herald.providers.pacing), so
# that burst reaches the provider smoothed and L itself costs no 429 (0 of 2,120 in the backlog pass,
# where 0.97 L held the route at 0.92 L; `--submit-rate` tries others).
SUBMIT_RATE_FRACTION = 1.0
# The backlog pass's route limit L when the rate-limit pass is skipped (`--rate-limit 0`).
DEFAULT_LIMIT = 10.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0].splitlines()[0])
    parser.add_argument("--intents", type=int, default=300,
                        help="intents per variant, pass and round (default 300); 0 skips the side-by-side passes")  # fmt: skip
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds of the throughput and latency passes, variants in alternating order, pooled (default 1)",
    )
    parser.add_argument(
        "--rate", type=float, default=0, help="offered intents/s of the throughput pass; 0 = unlimited (default)"
    )
    parser.add_argument("--latency-rate", type=float, default=20,
                        help="offered intents/s of the latency pass (default 20); 0 skips the pass")  # fmt: skip
    parser.add_argument(
        "--receipts", type=int, default=None, help="reports for the report-path figure (default --intents; 0 skips)"
    )
    parser.add_argument(
        "--parked",
        type=int,
        default=0,
        help="open intents to park for the memory figure (default 0; 10000 for the target)",
    )
    parser.add_argument(
        "--rate-limit", type=float, default=10, help="emulator limit L, messages/s (default 10; 0 skips)"
    )
    parser.add_argument(
        "--rate-limit-intents", type=int, default=100, help="intents offered at once under the limit (default 100)"
    )
    parser.add_argument("--submit-rate", type=float, default=None,
                        help="the worker's HERALD_SUBMIT_RATE_LIMIT under the limit, submits/s"
                             " (default L; 0 = no server-side limit)")  # fmt: skip
    parser.add_argument("--backlog", type=int, default=2000,
                        help="tenant A's batch in the backlog pass, priority and tenants on and off (default 2000;"
                             " 0 skips the pass); the route's limit is --rate-limit, or 10 when that is 0")  # fmt: skip
    parser.add_argument("--backlog-seconds", type=int, default=60,
                        help="seconds of urgent and tenant B intents, one each a second, in the backlog pass (default 60)")  # fmt: skip
    parser.add_argument("--backlog-arms", choices=("on,off", "on", "off"), default="on,off",
                        help="the backlog pass's arms, in this order (default on,off; one arm halves the pass,"
                             " for a before/after of one change)")  # fmt: skip
    parser.add_argument("--split-worker", action="store_true",
                        help="a rate-limited route's worker as two processes, one polling the workflow queue and"
                             " one the submit queue (HERALD_WORKER_QUEUES), in the rate-limit and backlog passes")  # fmt: skip
    parser.add_argument("--urgent-worker", action="store_true",
                        help="a rate-limited route's urgent lane (herald/temporal/task_queues.py) polled by a process"
                             " of its own, in the rate-limit and backlog passes")  # fmt: skip
    parser.add_argument("--no-urgent-lane", action="store_true",
                        help="start priority-1 intents on the route's own workflow queue, as HERALD_URGENT_LANE=0 does"
                             " (a before/after of the urgent lane)")  # fmt: skip
    parser.add_argument("--step-ms", type=int, default=20,
                        help="emulator lifecycle step: `delivered` is reported 3 steps after acceptance (default 20)")  # fmt: skip
    parser.add_argument("--wait-for-load", type=float, default=0,
                        help="first wait (up to 10 min) for the 1-minute load average to drop below this; 0 = no wait")  # fmt: skip
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="where to write the results (default bench/RESULTS.md; with --intents 0, nowhere unless given)",
    )
    parser.add_argument("--no-results", action="store_true", help="print only; do not write the results file")
    parser.add_argument(
        "--scale-out",
        action="store_true",
        help="only the capacity check: Herald's throughput pass with 1 worker + 1 receipt server, then 2 + 2"
        " (writes bench/RESULTS-scale-out.md unless --results names another file)",
    )
    parser.add_argument("--channel", choices=("sms", "email"), default="sms",
                        help="sms (default): the passes above; email: the side-by-side passes and the report path"
                             " on the e-mail channel against the ESP emulator (bench/email_bench.py; writes"
                             " bench/RESULTS-email.md unless --results names another file; the rate-limit, backlog"
                             " and parked passes are SMS-only)")  # fmt: skip
    parser.add_argument("--notice", action="store_true",
                        help="with --channel email: also the two-channel notice pass, --intents notices (an SMS and"
                             " an e-mail each) through Herald against two floor workflows each, offered as fast as"
                             " the driver can and at half --latency-rate notices/s")  # fmt: skip
    args = parser.parse_args(argv)
    if args.notice and args.channel != "email":
        parser.error("--notice: only with --channel email (its figures are in the e-mail results)")
    if args.scale_out and args.channel != "sms":
        parser.error("--scale-out: only with --channel sms (it is Herald's SMS throughput pass)")
    if args.results is None and args.scale_out:
        args.results = SCALE_OUT_RESULTS
    elif args.results is None and args.channel == "email" and args.intents:
        args.results = EMAIL_RESULTS
    elif args.results is None and args.intents:
        args.results = RESULTS
    # Otherwise None: a run without the side-by-side passes is for one pass alone, and its mostly
    # empty table must not replace bench/RESULTS.md.
    if args.receipts is None:
        args.receipts = args.intents
    return args


def submit_rate_for(args: argparse.Namespace, limit: float) -> float | None:
    """The limited worker's HERALD_SUBMIT_RATE_LIMIT for a route limited to `limit` (None: no server-side limit)."""
    return SUBMIT_RATE_FRACTION * limit if args.submit_rate is None else args.submit_rate or None


def wait_for_load(threshold: float) -> None:
    deadline = time.monotonic() + 600
    while float(report.loadavg()) >= threshold and time.monotonic() < deadline:
        print(f"1-minute load {report.loadavg()} ≥ {threshold}: waiting", flush=True)
        time.sleep(20)


async def measure_scale_out(args: argparse.Namespace, stack: BenchStack) -> ScaleOut:
    bench = Bench(stack)
    await bench.open()
    try:
        await run_herald(bench, WARMUP_INTENTS, None, 120)
        print(f"scale-out check: {args.intents} intents with 1 worker + 1 receipt server, then 2 + 2", flush=True)
        return await run_scale_out(bench, args.intents, 120 + args.intents / 2)
    finally:
        await bench.close()


async def measure(args: argparse.Namespace, stack: BenchStack) -> dict:
    bench = Bench(stack)
    bench.split_worker = args.split_worker
    bench.urgent_worker = args.urgent_worker
    bench.urgent_lane = not args.no_urgent_lane
    await bench.open()
    timeout = 120 + args.intents / 2
    out: dict = {"throughput": {}, "latency": None, "receipts": None, "parked": None, "rate_limit": None,
                 "backlog": None, "rounds": {}}  # fmt: skip
    try:
        if args.intents:
            rates = pass_rates(args.rate, args.latency_rate)
            pooled, out["rounds"] = await run_passes(bench, RUNNERS, args.intents, args.rounds, rates, timeout)
            out.update(pooled)
        if args.receipts:
            print(f"report path: {args.receipts} reports", flush=True)
            out["receipts"] = await run_receipts(bench, args.receipts, timeout + args.receipts / 5)
            print(f"report path, floor: {args.receipts} reports", flush=True)
            out["floor_receipts"] = await run_floor_receipts(bench, args.receipts, timeout + args.receipts / 5)
        if args.rate_limit:
            print(f"rate limit: {args.rate_limit_intents} intents against L = {args.rate_limit:g}/s", flush=True)
            out["rate_limit"] = await run_rate_limited(
                bench,
                args.rate_limit_intents,
                args.rate_limit,
                300 + args.rate_limit_intents,
                submit_rate_for(args, args.rate_limit),
            )
        if args.backlog:
            limit = args.rate_limit or DEFAULT_LIMIT
            arms = tuple(args.backlog_arms.split(","))
            out["backlog"] = await run_backlog(
                bench, args.backlog, args.backlog_seconds, limit, submit_rate_for(args, limit), arms
            )
        if args.parked:
            print(f"parked: {args.parked} open intents", flush=True)
            out["parked"] = await run_parked(bench, args.parked, 600 + args.parked / 2)
    finally:
        await bench.close()
    return out


def render(
    args: argparse.Namespace, make_command: str, command: str, load_before: str, load_after: str, out: dict
) -> str:
    parked_hint = 'make bench ARGS="--intents 20 --latency-rate 0 --receipts 10000 --rate-limit 0 --results bench/RESULTS-parked.md"'
    lines = [
        "# Herald benchmark results",
        "",
        (
            f"Generated by `{make_command}` (that is, `{command}`) on {report.now()}. Every figure below comes from that one run;"
            " rerun the command to reproduce them (they vary from run to run, more so for small runs)."
        ),
        "",
        "## Machine",
        "",
        *report.machine(),
        f"- 1-minute load average: {load_before} when the run started, {load_after} when it ended",
        "",
        "## Side by side",
        "",
        *(side_by_side(args, out) if out["throughput"] else ["Not run (`--intents 0`)."]),
        "",
        "## Report path (webhook → inbox → signal)",
        "",
        *report.receipts_section(out["receipts"], out.get("floor_receipts")),
        "",
        "## Under a provider rate limit",
        "",
        *report.rate_limit_section(out["rate_limit"]),
        "",
        "## Priority and tenants on a backlogged route",
        "",
        *backlog_report.backlog_section(out["backlog"]),
        "",
        "## Parked intents",
        "",
        *report.parked_section(out["parked"], parked_hint),
        "",
        "## Targets (computed from the figures above)",
        "",
        *report.targets(out["throughput"], out["latency"], out["parked"], out["receipts"], out.get("floor_receipts")),
        *(["- priority and tenants on a backlogged route: in its section above"] if out["backlog"] else []),
    ]
    return "\n".join(lines)


def side_by_side(args: argparse.Namespace, out: dict) -> list[str]:
    return [
        (
            f"{args.intents} intents per variant and pass"
            + (
                f", in each of {args.rounds} rounds (variants in alternating order; figures pool the rounds)"
                if args.rounds > 1
                else ""
            )
            + f"; emulator step {args.step_ms} ms (`delivered` is reported"
            f" {3 * args.step_ms} ms after acceptance, the same for all three)."
        ),
        "",
        report.main_table(out["throughput"], out["latency"], args.latency_rate),
        "",
        *report.details(out["throughput"], out["latency"]),
        *(line for name, rounds in out.get("rounds", {}).items() for line in report.round_ratios(name, rounds)),
        "",
        "How each figure is taken:",
        "",
        (
            "- *naive*: the driver POSTs to the emulator with a StatusCallback; `bench/receiver.py` verifies the final"
            " callback's signature and inserts one row. *floor*: start → submit activity → one signal (the receiver,"
            " on the final callback) → insert activity (`bench/floor.py`). *Herald*: `HeraldClient.send` → worker →"
            " emulator → both callbacks through Herald's receipt server (inbox, commit, 2xx, signal) → ledger."
        ),
        (
            "- latency: from the driver's clock just before the start call to the workflow's close event (floor, Herald:"
            " after the insert / the ledger write) or the row's insert time (naive); nearest-rank percentiles."
        ),
        "- intents/s: completed ÷ (last completion − first start).",
        (
            "- CPU: utime+stime from /proc of each process and its children, snapshot before the first start and when the"
            " last intent was seen complete (completion is polled every 0.2 s; the polling is in the driver column)."
            " Processes a variant does not use are not counted for it."
        ),
        (
            "- events and billable actions: counted from every workflow's fetched history by the rules in"
            " `bench/actions.py` (start, each activity attempt, each signal, timer, upsert, update; all local"
            " activities of one workflow task as one)."
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    command = "python -m bench" + (" " + shlex.join(argv) if argv else "")
    make_command = "make bench" + (f" ARGS={shlex.quote(shlex.join(argv))}" if argv else "")
    if args.wait_for_load:
        wait_for_load(args.wait_for_load)
    load_before = report.loadavg()
    stack = BenchStack(args.step_ms)
    failed = True
    try:
        print(f"starting the bench stack in {stack.state_dir}", flush=True)
        stack.start()
        if args.channel == "email":
            stack.start_email()
            out = asyncio.run(measure_email(args, stack))
        else:
            out = asyncio.run(measure_scale_out(args, stack) if args.scale_out else measure(args, stack))
        failed = False
    finally:
        stack.stop(keep_state=failed)
        if failed:
            print(f"bench failed; logs kept in {stack.state_dir / 'logs'}", file=sys.stderr)
    if args.scale_out:
        text = render_scale_out(out, make_command, report.now())
    elif args.channel == "email":
        text = render_email(args, make_command, load_before, report.loadavg(), out)
    else:
        text = render(args, make_command, command, load_before, report.loadavg(), out)
    print()
    print(text)
    if args.results is not None and not args.no_results:
        report.write_results(args.results, text)
        print(f"\nwritten to {args.results}")
    elif not args.no_results:
        print("\nno results file written: a run without the side-by-side passes writes only to a --results file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
