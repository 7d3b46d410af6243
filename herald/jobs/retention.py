"""The retention job: `python -m herald.jobs.retention --inbox-days 30 [--marks-days 30]`.

Run it daily (cron, a Kubernetes CronJob, a Temporal schedule). It replaces the raw payload of
every decided report older than the period with a marker and records the run in ledger_purges;
the reports themselves (status, error code, times, verdict) stay, and undecided reports keep their
payloads until they are decided. Safe to run twice or from two places: a purged payload is skipped.
With ``--marks-days`` it also deletes the provider marks (what submits told about each provider
while it was watched: migration 021) older than that; each attempt keeps its own route reason.

The ledger refuses a period under 7 days (migrations 015 and 023: payloads are kept that long to
explain verdicts, marks to explain route decisions); the refusal is one line naming the option,
and nothing is purged.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable
from datetime import timedelta

import psycopg

from herald.intake.errors import HeraldError
from herald.ledger.privacy import Purge, purge_inbox_payloads, purge_provider_marks
from herald.ledger.retention import ledger_now
from herald.runtime import exits
from herald.runtime.process import LEDGER, ProcessRuntime
from herald.settings import load_settings

MAX_DAYS = 36_500


def _days(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 <= int(text) <= MAX_DAYS:
        raise argparse.ArgumentTypeError(f"must be a whole number of days from 0 to {MAX_DAYS}")
    return int(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m herald.jobs.retention",
        description="Purge the raw payloads of decided reports (and, with --marks-days, provider marks) past their retention period; recorded in ledger_purges.",
        epilog="example:\n  python -m herald.jobs.retention --inbox-days 30 --marks-days 30 --operator nightly-cron",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--inbox-days", type=_days, required=True, help="keep raw report payloads this many days")
    parser.add_argument("--marks-days", type=_days, help="also delete provider marks older than this many days")
    parser.add_argument("--operator", default="retention-job", help="who runs it, as ledger_purges records it")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> str:
    runtime = ProcessRuntime(load_settings())
    # A job run from cron has no one watching its pool retry: one bounded try, then one line.
    async with runtime.pool(LEDGER, "required: the ledger whose inbox is purged") as pool:
        now = await ledger_now(pool)
        inbox_cut = now - timedelta(days=args.inbox_days)
        purge = await _floored("--inbox-days", purge_inbox_payloads(
            pool, older_than=inbox_cut, operator=args.operator, reason=f"inbox retention: {args.inbox_days} days"))  # fmt: skip
        said = f"purged {purge.rows_affected} report payload(s) received before {inbox_cut:%Y-%m-%d %H:%M} UTC (ledger_purges id {purge.purge_id})"
        if args.marks_days is None:
            return said
        marks_cut = now - timedelta(days=args.marks_days)
        marks = await _floored("--marks-days", purge_provider_marks(
            pool, older_than=marks_cut, operator=args.operator, reason=f"provider marks retention: {args.marks_days} days"))  # fmt: skip
    return f"{said}\ndeleted {marks.rows_affected} provider mark(s) made before {marks_cut:%Y-%m-%d %H:%M} UTC (ledger_purges id {marks.purge_id})"


async def _floored(option: str, purge: Awaitable[Purge]) -> Purge:
    try:
        return await purge
    except psycopg.errors.InvalidParameterValue as error:
        # The retention floor (SQLSTATE 22023): the ledger's message is its own words, naming the rule.
        raise HeraldError(f"{option}: {error.diag.message_primary}") from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return exits.run_job(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
