"""The capacity model's check on one machine: one worker and one receipt server, then two of each.

Both passes run Herald's throughput pass against the same Temporal dev server and the same
PostgreSQL. The second worker hands its StatusCallback URL to the second receipt server
(HERALD_RECEIPT_PUBLIC_URL), so each receipt server takes the reports of the messages its worker
sent: the split a load balancer would make, without one. The model (bench/CAPACITY.md) predicts
that per-intent costs are properties of the work, not of how many processes share it, so CPU per
intent stays within a few percent while throughput stays bounded by the machine's two cores.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from bench.common import Phase, new_tag, read_histories, wait_until, workflows_closed
from bench.context import ROLES, Bench
from bench.herald_run import run_herald
from bench.notice_run import notice_states, send_notices
from bench.stack import NO_FAULTS
from devstack.processes import free_port, wait_for_port
from devstack.stack import START_TIMEOUT_SECONDS

SCALED_ROLES: dict[str, str | tuple[str, ...]] = {
    **ROLES["herald"],
    "worker": ("worker", "worker-2"),
    "receipts": ("receipts", "receipts-2"),
}


@dataclass
class ScaleOut:
    one: Phase
    two: Phase
    # Around the 1 + 1 pass: PostgreSQL commits and WAL bytes per intent; after both passes, rows
    # and bytes (tables and indexes) per intent of each ledger table, over every intent in it.
    commits_per_intent: float = 0.0
    wal_bytes_per_intent: float = 0.0
    table_rows_per_intent: dict[str, float] = field(default_factory=dict)
    table_bytes_per_intent: dict[str, float] = field(default_factory=dict)
    # Two-channel notices (an SMS and an e-mail under one key): billable actions per notice, by channel.
    notices: int = 0
    notice_actions: dict[str, Counter[str]] = field(default_factory=dict)
    notice_states: Counter[str] = field(default_factory=Counter)


async def _database_counters(bench: Bench) -> tuple[int, int]:
    async with bench.pool.connection() as conn:
        row = await (await conn.execute(
            """SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint
                 FROM pg_stat_database WHERE datname = current_database()""")).fetchone()  # fmt: skip
    assert row is not None
    return int(row[0]), int(row[1])


async def _ledger_footprint(bench: Bench) -> tuple[dict[str, float], dict[str, float]]:
    async with bench.pool.connection() as conn:
        intents = (await (await conn.execute("SELECT count(*) FROM intents")).fetchone())[0]  # type: ignore[index]
        tables = [r[0] for r in await (await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'bench_deliveries'")).fetchall()]  # fmt: skip
        rows, sizes = {}, {}
        for table in sorted(tables):
            count, size = await (await conn.execute(
                f"SELECT count(*), pg_total_relation_size('{table}') FROM {table}")).fetchone()  # type: ignore[misc]  # fmt: skip
            rows[table], sizes[table] = count / intents, size / intents
    return rows, sizes


def _wait_for_log(bench: Bench, name: str, needle: str) -> None:
    log = bench.stack.local.log_dir / f"{name}.log"
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if log.exists() and needle in log.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{name} did not log {needle!r}: {bench.stack.local.log_tail(name)}")


def start_second_pair(bench: Bench) -> None:
    port = free_port()
    public = {"HERALD_RECEIPT_PORT": str(port), "HERALD_RECEIPT_PUBLIC_URL": f"http://127.0.0.1:{port}"}
    receipts = bench.stack.spawn("receipts-2", [sys.executable, "-m", "herald.receipts"], extra_env=public)
    wait_for_port("127.0.0.1", port, START_TIMEOUT_SECONDS, receipts.process)
    bench.stack.spawn("worker-2", [sys.executable, "worker.py"], extra_env={**public, **NO_FAULTS})
    _wait_for_log(bench, "worker-2", "worker polling task queue")


async def run_notices(bench: Bench, n: int, timeout: float) -> tuple[dict[str, Counter[str]], Counter[str]]:
    """Send n two-channel notices, wait for every intent to close, count actions per channel."""
    tag = new_tag()
    prefix = f"order_receipt:notice_{tag}_"
    _, runs = await send_notices(bench, n, None, prefix)
    await wait_until(lambda: workflows_closed(bench.herald_temporal, prefix, 2 * n), timeout)
    by_channel: dict[str, Counter[str]] = {}
    for channel in ("sms", "email"):
        figures = await read_histories(bench.herald_temporal, {w: r for w, r in runs.items() if w.endswith(f"/{channel}")})
        by_channel[channel] = figures.actions
    return by_channel, await notice_states(bench, prefix)


async def run_scale_out(bench: Bench, n: int, timeout: float) -> ScaleOut:
    # The stats collector flushes at each transaction's end; a moment lets the warm-up's land first.
    await asyncio.sleep(1.0)
    commits, wal = await _database_counters(bench)
    one = await run_herald(bench, n, None, timeout)
    await asyncio.sleep(1.0)
    commits_after, wal_after = await _database_counters(bench)
    start_second_pair(bench)
    try:
        await run_herald(bench, max(10, n // 30), None, timeout, SCALED_ROLES)  # warm the new pair, untimed
        two = await run_herald(bench, n, None, timeout, SCALED_ROLES)
    finally:
        bench.stack.stop_process("worker-2")
        bench.stack.stop_process("receipts-2")
    notices = max(10, n // 3)
    notice_actions, notice_states = await run_notices(bench, notices, timeout)
    rows, sizes = await _ledger_footprint(bench)
    return ScaleOut(
        notices=notices,
        notice_actions=notice_actions,
        notice_states=notice_states,
        one=one,
        two=two,
        commits_per_intent=(commits_after - commits) / n,
        wal_bytes_per_intent=(wal_after - wal) / n,
        table_rows_per_intent=rows,
        table_bytes_per_intent=sizes,
    )


def render(result: ScaleOut, command: str, when: str) -> str:
    columns = ("temporal", "worker", "receipts", "postgres", "emulator", "driver")
    names = {"temporal": "Temporal server", "worker": "worker(s)", "receipts": "receipt server(s)",
             "postgres": "PostgreSQL", "emulator": "emulator", "driver": "driver"}  # fmt: skip
    one, two = result.one.cpu_ms_per_intent, result.two.cpu_ms_per_intent

    def ratio(a: float | None, b: float | None) -> str:
        return f"{b / a:.2f}×" if a and b else "—"

    rows = [
        "| | 1 worker + 1 receipt server | 2 workers + 2 receipt servers | 2+2 / 1+1 |",
        "|---|--:|--:|--:|",
        f"| intents completed end to end, /s | {result.one.throughput or 0:.1f} | {result.two.throughput or 0:.1f} "
        f"| {ratio(result.one.throughput, result.two.throughput)} |",
    ]
    for column in columns:
        rows.append(f"| CPU ms/intent: {names[column]} | {one.get(column, 0):.1f} | {two.get(column, 0):.1f} "
                    f"| {ratio(one.get(column), two.get(column))} |")  # fmt: skip
    total_one, total_two = sum(one.values()), sum(two.values())
    rows.append(f"| CPU ms/intent: total | {total_one:.1f} | {total_two:.1f} | {ratio(total_one, total_two)} |")
    rows.append(
        f"| other processes' CPU, cores | {result.one.foreign_cores or 0:.2f} | {result.two.foreign_cores or 0:.2f} | |"
    )
    rows.append(f"| final states | {dict(result.one.states)} | {dict(result.two.states)} | |")
    split = result.two.process_cpu
    shares = ", ".join(
        f"{name} {1000 * split.get(name, 0.0) / max(result.two.completed, 1):.1f}"
        for name in ("worker", "worker-2", "receipts", "receipts-2")
    )
    return "\n".join(
        [
            "# Scale-out check (bench/scale_out.py)",
            "",
            f"Generated by `{command}` on {when}; {result.one.intents} intents per pass, offered as fast as the"
            " driver can, one Temporal dev server and one PostgreSQL throughout. Read with bench/CAPACITY.md.",
            "",
            *rows,
            "",
            f"How the 2 + 2 pass split its work, CPU ms per intent: {shares}.",
            "",
            "## Per intent, for the capacity model",
            "",
            f"- Temporal: {result.one.events / max(result.one.completed, 1):.1f} history events and"
            f" {result.one.history_bytes / max(result.one.completed, 1):,.0f} history bytes (serialized events, payloads"
            f" encrypted) per intent; billable actions {sum(result.one.actions.values()) / max(result.one.completed, 1):.2f}"
            f" ({dict(result.one.actions)})",
            f"- PostgreSQL, 1 + 1 pass: {result.commits_per_intent:.1f} commits and {result.wal_bytes_per_intent:,.0f} WAL"
            " bytes per intent (every database of the server: the ledger, and the stats collector's own writes)",
            "- ledger rows per intent: " + ", ".join(f"{t} {v:.2f}" for t, v in result.table_rows_per_intent.items() if v),
            _notice_line(result),
            "- ledger bytes per intent (table + indexes + TOAST): "
            + ", ".join(f"{t} {v:,.0f}" for t, v in result.table_bytes_per_intent.items() if v)
            + f"; total {sum(result.table_bytes_per_intent.values()):,.0f}",
            "",
        ]
    )


def _notice_line(result: ScaleOut) -> str:
    if not result.notices:
        return "- two-channel notices: not run"
    per = {channel: sum(actions.values()) / result.notices for channel, actions in result.notice_actions.items()}
    sms_alone = sum(result.one.actions.values()) / max(result.one.completed, 1)
    total = sum(per.values())
    return (
        f"- a two-channel notice (SMS + e-mail under one key, {result.notices} of them, offered at once):"
        f" {total:.2f} billable actions ({', '.join(f'{c} {v:.2f}' for c, v in per.items())}) ="
        f" {total / sms_alone:.2f}× an SMS alone ({sms_alone:.2f}); by type"
        f" {({c: dict(a) for c, a in result.notice_actions.items()})}; final states {dict(result.notice_states)}"
    )
