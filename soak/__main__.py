"""`make soak`: N intents through a seeded fault mix while workers are SIGKILLed every M seconds.

    python -m soak [--intents 10000] [--kill-every 20] [--seed 7] [--concurrency 16]
                   [--mix default|twins|queue_backlog|failover] [--rate N]

Runs its own stack on free loopback ports (Temporal dev server, embedded PostgreSQL, emulator,
receipt server, two workers), so it never touches `make run`'s. Prints one table: intents,
messages accepted at the emulator, duplicates, lost reports, coverage, delivered, unknown (and
how much of it the emulator was told to cause, and how much it was not), Herald's own duplicate
count from the ledger beside the emulator's, wall time. Bounded: every wait has a deadline.
`--mix failover` adds the Infobip emulator as the second SMS provider and Twilio outage windows
(soak/failover.py), and counts at both emulators.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx

from devstack.config import AdapterDev, EmulatorDev, InfobipDev, ReceiptsDev, StackConfig, TemporalDev
from devstack.processes import free_port
from devstack.stack import LocalStack
from herald.client import HeraldClient
from herald.core.intent import workflow_id_for
from herald.ledger.report import ledger_report
from herald.ledger.store import open_pool
from herald.runtime.process import ProcessRuntime
from herald.settings import load_settings
from soak import failover
from soak.mixes import INFOBIP_FAILOVER_MIX, MIXES

_NO_EVIDENCE_FAULTS = {"silent"}
_DEFINITE_FAILURES = {"failed", "undelivered", "canceled"}


def build_stack(intents: int) -> LocalStack:
    config = StackConfig(
        state_dir=Path(tempfile.mkdtemp(prefix="herald-soak-")),
        temporal=TemporalDev(port=free_port(), ui_port=free_port(), metrics_port=free_port(), db_filename="temporal.db",
                             task_queue="herald-soak"),
        emulator=EmulatorDev(port=free_port(), step_ms=100),
        # Started by the failover mix only; on a free port all the same, so no mix meets make run's.
        infobip=InfobipDev(port=free_port(), step_ms=100),
        receipts=ReceiptsDev(port=free_port()),
        adapter=AdapterDev(read_timeout=2.0, connect_timeout=1.0),
    )  # fmt: skip
    return LocalStack(config, database_url="")


async def killer(
    stack: LocalStack, every: float, stop: asyncio.Event, kills: list[float], env: dict[str, str] | None = None
) -> None:
    """SIGKILL one worker every `every` seconds, alternating, and start it again at once (with `env`)."""
    names = ["worker-a", "worker-b"]
    turn = 0
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=every)
            return
        except TimeoutError:
            pass
        name = names[turn % 2]
        turn += 1
        stack.processes[name].kill()
        kills.append(time.monotonic())
        stack.start_worker(name, extra_env=env)


async def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    mix, policy = MIXES[args.mix]
    two = args.mix == "failover"
    stack = build_stack(args.intents)
    started = time.monotonic()
    gate, outages, worker_env = None, None, None
    try:
        stack.start_postgres()
        await asyncio.to_thread(stack.migrate)
        stack.start_temporal()
        stack.start_emulator(["--max-messages", str(args.intents * 3)])
        if two:
            gate, worker_env = await failover.start_two_providers(stack)
            # Their own stream, so the windows do not move when the fault mix changes.
            outages = failover.Outages(gate, random.Random(f"{args.seed}-outages"))
        stack.start_receipts()
        stack.start_worker("worker-a", extra_env=worker_env)
        stack.start_worker("worker-b", extra_env=worker_env)
        runtime = ProcessRuntime(load_settings(stack.config.service_env(stack.database_url)))
        # Intents travel sealed with their recipient's key, as a service with the ledger sends them.
        vault_pool = open_pool(stack.database_url, max_size=2)
        await vault_pool.open()
        herald = HeraldClient(
            await runtime.temporal(), runtime.settings().temporal.task_queue, keyring=runtime.keyring(), policy=policy,
            vault=runtime.vault(vault_pool),
        )  # fmt: skip
        emulator_url = f"http://{stack.config.emulator.host}:{stack.config.emulator.port}"
        infobip_url = f"http://{stack.config.infobip.host}:{stack.config.infobip.port}"
        faults = [rng.choices(mix, weights=[w for _, _, w in mix])[0] for _ in range(args.intents)]
        # Drawn after Twilio's, so the other mixes' draws stay what they were for a seed.
        infobip_faults = [
            rng.choices(INFOBIP_FAILOVER_MIX, weights=[w for _, _, w in INFOBIP_FAILOVER_MIX])[0] if two else (None, {}, 0)
            for _ in range(args.intents)
        ]  # fmt: skip
        # Twins share a number and a text; everything else sends each intent to its own number.
        pair = (lambda index: index // 2) if args.mix == "twins" else (lambda index: index)
        recipients = [f"+1555{pair(index):07d}" for index in range(args.intents)]
        stop, kills, sent_at = asyncio.Event(), [], [0.0] * args.intents
        killing = asyncio.create_task(killer(stack, args.kill_every, stop, kills, worker_env))
        stop_outages = asyncio.Event()
        windows = asyncio.create_task(outages.run(stop_outages)) if outages else None
        slots = asyncio.Semaphore(args.concurrency)
        # Paced sends, so outage windows come and go while intents arrive (none: all at once).
        rate = args.rate if args.rate is not None else (2.0 if two else None)
        first_send = time.monotonic()

        # Idle connections dropped well before the emulators' servers drop them (uvicorn: 5 s), so a
        # paced send never reuses one the server is closing (a ReadError on the admin API, not Herald's).
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(keepalive_expiry=1.0)) as admin:

            async def arm(url: str, to: str, fault: str | None, params: dict) -> None:
                if fault:
                    body = {"fault": fault, "count": 1, **params}
                    response = await admin.put(f"{url}/_emulator/faults/{to}", json=body)
                    response.raise_for_status()

            async def one(index: int) -> None:
                if rate:
                    await asyncio.sleep(max(0.0, first_send + index / rate - time.monotonic()))
                async with slots:
                    await arm(emulator_url, recipients[index], *faults[index][:2])
                    await arm(infobip_url, recipients[index], *infobip_faults[index][:2])
                    sent_at[index] = time.monotonic()
                    await herald.send({
                        "business_key": f"order_receipt:soak_{args.seed}_{index}", "recipient": recipients[index],
                        "template_id": "order_receipt", "template_version": 1,
                        "render_data": {"order_ref": f"ord_{pair(index)}", "amount": "9.99", "currency": "EUR",
                                        "merchant": "Soak"}})  # fmt: skip

            await asyncio.gather(*(one(i) for i in range(args.intents)))
            sent = time.monotonic()
            stop_outages.set()
            if windows:
                await windows
            print(f"sent {args.intents} intents in {sent - started:.0f}s; waiting for every one to close", flush=True)
            deadline = sent + args.settle_timeout
            async with open_pool(stack.database_url, max_size=2) as pool:
                while time.monotonic() < deadline:
                    async with pool.connection() as conn:
                        open_ = (await (await conn.execute("SELECT count(*) FROM unresolved_intents")).fetchone())[0]
                        # An intent's row is written with its first submit: count them too, or an intent
                        # not yet dispatched would look resolved.
                        recorded = (await (await conn.execute("SELECT count(*) FROM intents")).fetchone())[0]
                    if open_ == 0 and recorded >= args.intents:
                        break
                    await asyncio.sleep(2)
                stop.set()
                await killing
                # Every message an emulator still holds (a queue, a delayed report) reports before
                # the ledger is read, so a late copy is counted, not missed; bounded all the same.
                quiet_by = time.monotonic() + args.settle_timeout
                while time.monotonic() < quiet_by:
                    if (await admin.get(f"{emulator_url}/_emulator/stats")).json()["running_lifecycles"] == 0 and (
                        not two or (await admin.get(f"{infobip_url}/_emulator/stats")).json()["running_tasks"] == 0
                    ):
                        break
                    await asyncio.sleep(2)
                await asyncio.sleep(5)  # let the last reports and redeliveries settle
                wall = time.monotonic() - started
                async with pool.connection() as conn:
                    states = dict(await (await conn.execute(
                        "SELECT workflow_id, state FROM intent_current_state")).fetchall())  # fmt: skip
                    undecided = (await (await conn.execute("SELECT count(*) FROM undecided_reports")).fetchone())[0]
                    inbox = {(sid, status) for sid, status in await (await conn.execute(
                        "SELECT provider_message_id, provider_status FROM receipt_inbox")).fetchall()}  # fmt: skip
                    claims = dict(await (await conn.execute(
                        "SELECT provider_message_id, attempt_ref FROM message_claims")).fetchall())  # fmt: skip
                    attempts = [failover.LedgerAttempt(ref, wf, number, provider, reason or "", at) for ref, wf, number,
                                provider, reason, at in await (await conn.execute(
                        "SELECT attempt_ref, workflow_id, number, provider, route_reason, recorded_at FROM attempts"
                    )).fetchall()]  # fmt: skip
                    marks = await (await conn.execute(
                        "SELECT provider, mark, attempt_ref, marked_at FROM provider_marks")).fetchall()  # fmt: skip
                report = await ledger_report(pool)
            messages = (await admin.get(f"{emulator_url}/_emulator/messages")).json()["messages"]
            at_infobip = (await admin.get(f"{infobip_url}/_emulator/messages")).json()["messages"] if two else []
        await vault_pool.close()
    finally:
        if gate is not None:
            await gate.close()
        stack.stop()

    by_recipient: dict[str, list[bool]] = {}  # whether each message a number got is a live copy
    for message in messages:
        by_recipient.setdefault(failover.number(message["to"]), []).append(message["status"] not in _DEFINITE_FAILURES)
    for message in at_infobip:
        by_recipient.setdefault(failover.number(message["to"]), []).append(failover.infobip_live(message))
    # A live message beyond one per intent sent to that number (twins share a number: two intents, two).
    intents_per_number = Counter(failover.number(r) for r in recipients)
    duplicates = sum(max(0, sum(by_recipient.get(r, [])) - n) for r, n in intents_per_number.items())
    # Which attempt created each message: read from the StatusCallback its create carried at Twilio;
    # at Infobip the messageId is Herald's attempt reference.
    creators = {m["sid"]: parse_qs(urlsplit(m["status_callback"] or "").query).get("attempt", [None])[0] for m in messages}  # fmt: skip
    creators.update({m["messageId"]: m["messageId"] for m in at_infobip})
    misattributed = sum(1 for sid, holder in claims.items() if creators.get(sid) != holder)
    acknowledged_not_stored = sum(
        1
        for message in messages
        for callback in message["callbacks"]
        if 200 <= (callback.get("http_status") or 0) < 300 and (message["sid"], callback["status"]) not in inbox
    ) + failover.infobip_unstored_reports(at_infobip, inbox)
    workflow_ids = [workflow_id_for(f"order_receipt:soak_{args.seed}_{i}", "sms") for i in range(args.intents)]
    final = [states.get(wf, "missing") for wf in workflow_ids]
    counts = Counter(final)
    told_silent = sum(
        1 for i, state in enumerate(final)
        if state == "unknown" and {faults[i][0], infobip_faults[i][0]} & _NO_EVIDENCE_FAULTS
    )  # fmt: skip
    terminal = {"delivered", "undelivered", "permanent_failure", "expired", "cancelled", "suppressed"}
    n = args.intents
    cross = failover.cross_provider_duplicates(recipients, messages, at_infobip)
    rows = [
        ("intents", f"{n}"),
        *([] if two else [("messages accepted at the emulator", f"{len(messages)}")]),
        *(failover.failover_rows(
            recipients=recipients, workflow_ids=workflow_ids, sent_at=sent_at, windows=outages.windows,
            twilio=messages, infobip=at_infobip, attempts=attempts, marks=marks, sending_seconds=sent - first_send,
        ) if two and outages else []),
        ("duplicates (a second live message for an intent)", f"{duplicates}"),
        ("messages credited to an attempt that did not create them (target 0)", f"{misattributed} of {len(claims)} claims"),
        ("lost reports (2xx without an inbox row + rows without a verdict)", f"{acknowledged_not_stored + undecided}"),
        ("coverage (known terminal outcome)", f"{100 * sum(counts[s] for s in terminal) / n:.2f}%"),
        ("delivered", f"{100 * counts['delivered'] / n:.2f}%"),
        ("unknown", f"{100 * counts['unknown'] / n:.2f}% (of which the emulator was told to stay silent: "
                    f"{told_silent}/{counts['unknown']})"),
        ("unknown the emulator did not cause (target 0)", f"{counts['unknown'] - told_silent}"),
        ("duplicates sent, Herald's own report (starter.py report)",
         f"{report.duplicates_sent} {report.duplicates_by_cause or ''} "
         f"(presumed not accepted, then seen: {report.presumed_then_seen})"),
        ("still open at the deadline", f"{sum(1 for s in final if s not in terminal and s != 'unknown')}"),
        ("worker kills", f"{len(kills)} (one every {args.kill_every:.0f}s)"),
        ("wall time", f"{wall:.0f}s"),
        ("seed, fault mix", f"{args.seed}, {args.mix}" + (f", {rate:g} intents/s" if rate else "")),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    print("\n".join(f"{name:<{width}}  {value}" for name, value in rows))
    print("states:", dict(sorted(counts.items())))
    # A duplicate the emulator saw that Herald's own report does not count would be the worst failure.
    unexplained = duplicates - report.duplicates_sent
    if unexplained > 0:
        print(f"{unexplained} duplicate(s) at the emulator are missing from Herald's own report")
    clean = duplicates == 0 and cross == 0 and misattributed == 0 and acknowledged_not_stored + undecided == 0
    return 0 if clean else 1


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__.splitlines()[0])
    parser.add_argument("--intents", type=int, default=10_000, help="how many intents (at least 500 for a soak)")
    parser.add_argument("--kill-every", type=float, default=20.0, help="seconds between worker SIGKILLs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=16, help="starts in flight at once")
    parser.add_argument("--settle-timeout", type=float, default=1800.0, help="seconds to wait for every intent to close")
    parser.add_argument("--mix", choices=sorted(MIXES), default="default",
                        help="fault mix: default; queue_backlog (a quarter held 90 s in the sender's queue); "
                             "twins (pairs of intents, one number, one text, many answers lost); failover (Infobip "
                             "beside Twilio, Twilio refusing connections about 15 s in every 45 s)")  # fmt: skip
    parser.add_argument("--rate", type=float, default=None,
                        help="intents sent per second (default: all at once; 2 with --mix failover)")  # fmt: skip
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
