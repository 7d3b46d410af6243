"""The e-mail bench (`python -m bench --channel email [--notice]`): the SMS bench's passes on the e-mail channel.

The same three variants against the ESP emulator on loopback (an SMTP relay that posts signed
SendGrid events), in the same passes, rounds alternating:

  naive   one SMTP transaction per intent from the driver; the bench's receiver verifies the final
          event's signature and inserts one row                              (bench/naive.py)
  floor   the floor workflow on its e-mail queue: start → submit activity (one SMTP transaction)
          → the final event's signal → insert activity                       (bench/floor_email.py)
  Herald  e-mail intents through HeraldClient, the worker's SMTP adapter, the receipt server's
          /sendgrid/events route and the ledger

then the report path (m e-mails parked at the ESP, `no_events`; then one signed `delivered` event
post each, bench/sendgrid_play.py) for Herald and the floor, and with --notice the two-channel
notice pass (an SMS and an e-mail a notice, bench/notice_run.py: Herald's `send_notice` against two
floor workflows started one after the other, one on each queue). Herald's events come from the stack's ESP; the naive sender's
and the floor's from the bench's own (`esp_bench`), as an ESP posts to one webhook.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from temporalio.client import Client

from bench.common import read_histories
from bench.context import Bench
from bench.floor_receipts import run_floor_receipts
from bench.floor_run import run_floor
from bench.herald_run import ReceiptsResult, run_herald, run_receipts
from bench.naive import run_naive
from bench.passes import Runner, pass_rates, run_passes
from bench.stack import BenchStack

EMAIL_RESULTS = Path(__file__).resolve().parent / "RESULTS-email.md"
EMAIL_RUNNERS: dict[str, Runner] = {
    "naive": partial(run_naive, channel="email"),
    "floor": partial(run_floor, channel="email"),
    "herald": partial(run_herald, channel="email"),
}
# The notice pass: an SMS and an e-mail a notice, Herald's under one key, the floor's two workflows.
NOTICE_RUNNERS: dict[str, Runner] = {
    "floor": partial(run_floor, channel="notice"),
    "herald": partial(run_herald, channel="notice"),
}


async def measure_email(args: argparse.Namespace, stack: BenchStack) -> dict:
    """Every e-mail pass the arguments ask for, on a stack whose e-mail processes run (`start_email`)."""
    bench = Bench(stack)
    await bench.open()
    timeout = 120 + args.intents / 2
    out: dict = {"throughput": {}, "latency": None, "rounds": {}, "receipts": None, "floor_receipts": None,
                 "receipt_actions": {}, "notice": None, "notice_rounds": {}}  # fmt: skip
    try:
        if args.intents:
            rates = pass_rates(args.rate, args.latency_rate)
            pooled, out["rounds"] = await run_passes(bench, EMAIL_RUNNERS, args.intents, args.rounds, rates, timeout)
            out.update(pooled)
        if args.receipts:
            seconds = timeout + args.receipts / 5
            print(f"e-mail report path: {args.receipts} events", flush=True)
            out["receipts"] = await run_receipts(bench, args.receipts, seconds, "email")
            print(f"e-mail report path, floor: {args.receipts} events", flush=True)
            out["floor_receipts"] = await run_floor_receipts(bench, args.receipts, seconds, "email")
            for name, result, client in (("herald", out["receipts"], bench.herald_temporal),
                                         ("floor", out["floor_receipts"], bench.floor_temporal)):  # fmt: skip
                out["receipt_actions"][name] = await actions_per_report(client, result)
        if args.notice and args.intents:
            # Each notice is two messages: half the rate offers as many messages/s as the latency pass.
            rates = pass_rates(args.rate / 2, args.latency_rate / 2)
            out["notice"], out["notice_rounds"] = await run_passes(
                bench, NOTICE_RUNNERS, args.intents, args.rounds, rates, 2 * timeout, unit="notices"
            )
    finally:
        await bench.close()
    return out


async def actions_per_report(client: Client, result: ReceiptsResult) -> float | None:
    """Billable actions per parked intent over its whole life (start to close), from its history."""
    if not result.id_prefix or result.timed_out:
        return None
    runs = {w.id: None async for w in client.list_workflows(f'WorkflowId STARTS_WITH "{result.id_prefix}"')}
    figures = await read_histories(client, runs)
    return sum(figures.actions.values()) / len(runs) if runs else None
