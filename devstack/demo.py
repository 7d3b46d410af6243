"""The demo scenario `make run` plays: SMS intents over the seed templates, some with emulator
faults; two-channel notices (SMS and e-mail under one key); a report e-mail with an attachment;
and, on a paced route, an account notice sent ahead of a queued marketing batch.

Each fault is armed for one recipient at its emulator, so its intent meets that fault for real;
the summary then counts messages at the emulators (the oracles for duplicates) and outcomes in
Temporal.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx
import psycopg
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from psycopg_pool import AsyncConnectionPool

from agent_tool.store import demo_store
from devstack.demo_email import a_one_click_unsubscribe_stops_marketing_email
from devstack.demo_rows import CLASS, DemoRow, count_messages, notes, phone, settle
from herald import outbox
from herald.client import HeraldClient
from herald.core.contracts import IntentStatus
from herald.core.lifecycle import IntentState
from herald.core.message import Channel
from herald.core.send_policy import Category, PolicyRules
from herald.intake.errors import HeraldError, InvalidIntent
from herald.intake.requests import parse_request
from herald.ledger.artifacts import ArtifactStore
from herald.ledger.policy_store import grant_consent, policy_in_force, publish_policy

if TYPE_CHECKING:
    from devstack.config import StackConfig

# (fault armed at the emulator or None, parameters, what Herald should do about it)
SCENARIO: list[tuple[str | None, dict[str, Any], str]] = [
    (None, {}, "plain delivery"),
    (None, {}, "plain delivery"),
    (None, {}, "plain delivery"),
    (None, {}, "plain delivery"),
    (None, {}, "plain delivery"),
    (None, {}, "plain delivery"),
    ("accept_then_hang", {"hang_seconds": 6, "count": 1}, "timeout after acceptance: looked up, not resent"),
    ("accept_then_hang", {"hang_seconds": 6, "count": 1}, "timeout after acceptance: looked up, not resent"),
    ("callback_before_response", {"count": 1}, "report beats the create response"),
    ("callback_before_response", {"count": 1}, "report beats the create response"),
    ("duplicate_callbacks", {"copies": 3, "count": 1}, "every report three times"),
    ("duplicate_callbacks", {"copies": 3, "count": 1}, "every report three times"),
    ("out_of_order_callbacks", {"count": 1}, "delivered arrives before sent"),
    ("out_of_order_callbacks", {"count": 1}, "delivered arrives before sent"),
    ("no_callback", {"count": 1}, "no report: status polling finds the outcome"),
    ("no_callback", {"count": 1}, "no report: status polling finds the outcome"),
    ("error_500", {"count": 1}, "500: unknown, lookup proves absence, second attempt"),
    ("hang_without_accept", {"hang_seconds": 4, "count": 1}, "hang without acceptance: proven absent, resent once"),
    ("rate_limit", {"retry_after": 1, "count": 1}, "429 with Retry-After: retried after the hint"),
    ("undelivered", {"code": 30003, "count": 1}, "carrier says unreachable: undelivered, no retry"),
    ("reject", {"code": 21610, "count": 1}, "recipient opted out: permanent failure at once"),
    ("failed", {"code": 30001, "count": 1}, "provider queue overflow: retryable, second attempt"),
]

_TEMPLATES = [
    ("order_receipt", 1, "order_receipt:pay_{n}",
     lambda n: {"order_ref": f"ord_{n}", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}),
    ("seller_new_order", 2, "seller_new_order:ord_{n}",
     lambda n: {"order_ref": f"ord_{n}", "order_total": "EUR 18.00", "item_count": 2}),
    ("class_opening", 1, "class_opening:c9081_m{n}",
     lambda n: {"class_name": "Spin 18:00", "starts_at": "Mon 18:00", "hold_minutes": 15}),
]  # fmt: skip


# Who the demo service's agent acts for (agent_tool.tools.CALLERS): the eu marketplace and the
# riverside studio, whose records the demo asks about.
DEMO_AGENT_CALLER = "eu-marketplace-agent"

# Two-channel notices: (fault armed at the relay for the e-mail, or None, what it shows).
NOTICES: list[tuple[str | None, dict[str, Any], str]] = [
    (None, {}, "notice: SMS and e-mail, independent intents"),
    ("drop_after_data", {"count": 1}, "notice: relay hung up after DATA; its event proves acceptance"),
]
_NOTICE_DATA = {"order_ref": "ord_{n}", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}


async def play(
    herald: HeraldClient,
    emulator_url: str,
    *,
    esp_url: str | None = None,
    artifacts: ArtifactStore | None = None,
    ledger: AsyncConnectionPool | None = None,
    outbox_url: str | None = None,
    agent_env: dict[str, str] | None = None,
    paced_route: PacedRoute | None = None,
    inbound: InboundReplies | None = None,
    timeout: float = 120.0,
) -> list[DemoRow]:
    """Send the scenario's intents (and, with a relay, its notices and report e-mail; with a ledger
    and a paced route, the priority scene; with a ledger and `inbound`, the STOP scene) concurrently
    and wait for every one to close."""
    run_tag = datetime.now(UTC).strftime("%H%M%S") + secrets.token_hex(2)
    rows: list[DemoRow] = []
    email_rows: list[DemoRow] = []
    report_sha256: str | None = None
    async with httpx.AsyncClient(base_url=emulator_url, timeout=10) as admin:
        for n, (fault, params, expectation) in enumerate(SCENARIO):
            template_id, version, key_pattern, data = _TEMPLATES[n % len(_TEMPLATES)]
            recipient = "+1555" + f"{secrets.randbelow(10**7):07d}"
            if fault:
                (await admin.put(f"/_emulator/faults/{recipient}", json={"fault": fault, **params})).raise_for_status()
            key = key_pattern.format(n=f"{run_tag}_{n}")
            rows.append(DemoRow(key, f"{template_id}.v{version}", fault, expectation, recipient))
            await herald.send(
                {"business_key": key, "recipient": recipient, "template_id": template_id,
                 "template_version": version, "render_data": data(n)}
            )  # fmt: skip
        if esp_url is not None:
            async with httpx.AsyncClient(base_url=esp_url, timeout=10) as relay:
                for n, (fault, params, expectation) in enumerate(NOTICES):
                    phone = "+1555" + f"{secrets.randbelow(10**7):07d}"
                    address = f"buyer.{run_tag}.{n}@example.com"
                    if fault:
                        (await relay.put(f"/_esp/faults/{address}", json={"fault": fault, **params})).raise_for_status()
                    key = f"order_receipt:notice_{run_tag}_{n}"
                    data = {name: value.format(n=n) for name, value in _NOTICE_DATA.items()}
                    await herald.send_notice({"business_key": key, "channels": [
                        {"channel": "sms", "recipient": phone, "template_id": "order_receipt", "template_version": 1,
                         "render_data": data},
                        {"channel": "email", "recipient": address, "template_id": "order_receipt_email",
                         "template_version": 1, "render_data": data},
                    ]})  # fmt: skip
                    rows.append(DemoRow(key, "order_receipt.v1", None, expectation, phone))
                    email_rows.append(DemoRow(key, "order_receipt_email.v1", fault, expectation, address, Channel.EMAIL))
                if artifacts is not None:
                    report = _report_csv(run_tag).encode()
                    ref = await artifacts.put(report, media_type="text/csv", filename=f"sales-{run_tag}.csv")
                    report_sha256 = ref.sha256
                    key, address = f"monthly_report:seller_{run_tag}", f"seller.{run_tag}@example.com"
                    await herald.send({
                        "business_key": key, "channel": "email", "recipient": address, "template_id": "monthly_report",
                        "template_version": 1, "render_data": {"seller_name": "Herald Shop", "period": "2026-11"},
                        "attachment": ref.model_dump(),
                    })  # fmt: skip
                    email_rows.append(
                        DemoRow(key, "monthly_report.v1", None, "report e-mail with a CSV attachment", address, Channel.EMAIL)
                    )
                await settle(herald, email_rows, timeout)
                for row in email_rows:
                    listed = (await relay.get("/_esp/messages", params={"to": row.recipient})).json()["messages"]
                    row.messages_at_provider = row.live_messages = len(listed)
                    if row.template == "monthly_report.v1":
                        hashes = [a["sha256"] for message in listed for a in message["attachments"]]
                        row.attachment_verified = bool(hashes) and set(hashes) == {report_sha256}
        policy_rows = await _send_policy_cases(herald, ledger, run_tag) if ledger is not None else []
        if ledger is not None and inbound is not None:
            policy_rows += await a_stop_reply_suppresses_marketing(herald, admin, ledger, run_tag, inbound)
        if esp_url is not None and ledger is not None:  # e-mail rows: counted at the ESP, by the scene
            email_rows += await a_one_click_unsubscribe_stops_marketing_email(herald, esp_url, ledger, run_tag)
        rows += policy_rows
        if outbox_url is not None:
            rows.append(await _through_the_outbox(herald, outbox_url, run_tag))
        if agent_env is not None:
            rows.append(await _through_the_agent_tool(agent_env))
        # The intents above go on settling on the stack's own route meanwhile.
        priority_rows: list[DemoRow] = []
        if paced_route is not None and ledger is not None:
            priority_rows = await urgent_overtakes_batch(paced_route, admin, ledger, run_tag, timeout)
        await settle(herald, rows, timeout)
        if ledger is not None:
            await notes(ledger, policy_rows)
        for row in rows:
            listed = (await admin.get("/_emulator/messages", params={"to": row.recipient})).json()["messages"]
            if row.content_sha256 is not None:
                listed = [m for m in listed if hashlib.sha256(m["body"].encode()).hexdigest() == row.content_sha256]
            count_messages(row, listed)
    return rows + priority_rows + email_rows


@dataclass(frozen=True)
class PacedRoute:
    """A route of its own for the priority scene: intents sent with `herald` run on its task queue,
    whose submits the Temporal server lets out at `pace` a second once `release()` has started its
    submit worker (until then they wait in the server's queue)."""

    herald: HeraldClient
    pace: float
    release: Callable[[], Awaitable[None]]


# The priority scene: this many promotions queue on the paced route ahead of one account notice.
PRIORITY_BATCH = 40
_PROMOTION = {"class_name": "Barre 07:00", "starts_at": "Sat 07:00"}


async def urgent_overtakes_batch(
    route: PacedRoute,
    admin: httpx.AsyncClient,
    ledger: AsyncConnectionPool,
    run_tag: str,
    timeout: float,
    batch_size: int = PRIORITY_BATCH,
) -> list[DemoRow]:
    """A studio's promotion to `batch_size` members who agreed to marketing (priority 5) is queued on
    the paced route: every one has prepared its attempt, so its submit waits at the Temporal server. Then the
    route starts sending, and once the emulator has the first promotion a class reminder (account,
    priority 1) is sent on the same route. Where it went out is counted at the emulator, in the
    order the emulator created the messages.

    The route's submit worker starts only once the batch is queued: a real batch of thousands is
    queued long before its route drains it, where 40 on this machine take about as long to prepare
    as a 4/s route takes to send them, and there would be little queue left to overtake. Promotions
    the server had let out before the reminder's submit was queued still go first if they are at the
    emulator already; those still waiting in the submit worker's pacer go after it
    (herald/providers/pacing.py smooths the server's bursts and serves its waiters by priority).

    The first rows are the batch (left out of the table), the last is the reminder."""
    batch = [
        DemoRow(f"class_promotion:c9081_{run_tag}_b{n}", "class_promotion.v1", None,
                "marketing batch on the paced route", phone(), in_table=False)
        for n in range(batch_size)
    ]  # fmt: skip
    for row in batch:  # marketing needs consent evidence (the send policy), as a real list has it
        fingerprint = route.herald.keyring.recipient(row.recipient)
        await grant_consent(ledger, fingerprint=fingerprint, category=Category.MARKETING, source="make run demo",
                            granted_at=datetime.now(UTC))  # fmt: skip
    await asyncio.gather(*(
        route.herald.send({"business_key": row.key, "recipient": row.recipient, "template_id": "class_promotion",
                           "template_version": 1, "render_data": _PROMOTION})
        for row in batch
    ))  # fmt: skip
    await asyncio.wait_for(_prepared(route.herald, batch), timeout)
    batch_numbers = {row.recipient for row in batch}
    await route.release()
    gone_before = await asyncio.wait_for(_first_sent(admin, batch_numbers), timeout)
    urgent = DemoRow(f"class_reminder:c9081_{run_tag}_urgent", "class_reminder.v1", f"route paced {route.pace:g}/s",
                     "account notice behind a queued marketing batch", phone())  # fmt: skip
    await route.herald.send({"business_key": urgent.key, "recipient": urgent.recipient,
                             "template_id": "class_reminder", "template_version": 1, "render_data": CLASS})  # fmt: skip
    rows = [*batch, urgent]
    finals = await settle(route.herald, rows, timeout)
    sent = await _messages_in_order(admin, batch_numbers | {urgent.recipient})
    for row in rows:
        count_messages(row, [m for m in sent if m["to"] == row.recipient])
    found = overtaking([m["to"] for m in sent], urgent.recipient)
    if found is None:
        urgent.note = "  the urgent reminder never reached the emulator"
    else:
        urgent.note = (
            f"  urgent (account, priority {_priority(finals[-1:])}) sent {_ordinal(found.position)} of {found.sent} "
            f"at the emulator, {found.batch_behind} of the {found.batch} marketing (priority {_priority(finals[:-1])}) "
            f"still queued behind it; {gone_before} had gone before it was started"
        )
    return rows


async def _prepared(herald: HeraldClient, rows: list[DemoRow]) -> None:
    """Until every row's intent has prepared its attempt: its submit is in the route's queue."""
    while not all(status.attempts for status in await asyncio.gather(*(herald.status(row.key) for row in rows))):
        await asyncio.sleep(0.5)  # each round queries every workflow: not too often


async def _first_sent(admin: httpx.AsyncClient, recipients: set[str]) -> int:
    """Until the emulator has a message to `recipients`; how many it has then."""
    while not (sent := len(await _messages_in_order(admin, recipients))):
        await asyncio.sleep(0.1)
    return sent


async def _messages_in_order(admin: httpx.AsyncClient, recipients: set[str]) -> list[dict[str, Any]]:
    """The emulator's messages to `recipients`, oldest first (the order it created them)."""
    listed = (await admin.get("/_emulator/messages")).json()["messages"]
    return [m for m in listed if m["to"] in recipients]


@dataclass(frozen=True)
class Overtaking:
    """Where the urgent message stands among the scene's messages, in the emulator's creation order."""

    position: int  # 1: the first of them
    sent: int  # the scene's messages at the emulator
    batch: int  # of which the batch's
    batch_behind: int  # the batch's messages created after the urgent one


def overtaking(order: list[str], urgent: str) -> Overtaking | None:
    """From the recipients of the scene's messages, oldest first; None if `urgent` has none."""
    if urgent not in order:
        return None
    position = order.index(urgent)
    batch = [to for to in order if to != urgent]
    behind = sum(to != urgent for to in order[position + 1 :])
    return Overtaking(position=position + 1, sent=len(order), batch=len(batch), batch_behind=behind)


def _priority(finals: list[IntentStatus]) -> str:
    """The priority keys their attempts recorded (one, normally)."""
    keys = sorted({a.priority for final in finals for a in final.attempts if a.priority is not None})
    return "/".join(map(str, keys)) or "?"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# The demo's send policy: a 3 s recipient cooldown on SMS, so two intents to one number show a
# deferral. Published once into the local stack's ledger (owner "demo"), never in production.
DEMO_RULES = PolicyRules(cooldown_seconds={"sms": 3})


async def _send_policy_cases(herald: HeraldClient, ledger: AsyncConnectionPool, run_tag: str) -> list[DemoRow]:
    """Two reminders to one member (the second waits out the cooldown) and a promotion to a member
    who never agreed to marketing (suppressed, naming the rule)."""
    async with ledger.connection() as conn:
        _, in_force = await policy_in_force(conn, datetime.now(UTC))
    if in_force != DEMO_RULES:
        await publish_policy(ledger, DEMO_RULES, effective_from=datetime.now(UTC), owner="demo",
                             note="make run: a 3 s SMS recipient cooldown, to show a deferral")  # fmt: skip
    member = "+1555" + f"{secrets.randbelow(10**7):07d}"
    rows = []
    for n, class_name in enumerate(["Spin 18:00", "Yoga 19:30"]):
        key = f"class_reminder:c9081_{run_tag}_{n}"
        receipt = await herald.send({"business_key": key, "recipient": member, "template_id": "class_reminder",
                                     "template_version": 1, "render_data": {**CLASS, "class_name": class_name}})  # fmt: skip
        row = DemoRow(key, "class_reminder.v1", None, "two reminders to one member: one waits out the cooldown", member)
        row.content_sha256 = receipt.content_sha256
        rows.append(row)
    stranger = "+1555" + f"{secrets.randbelow(10**7):07d}"
    key = f"class_promotion:c9081_{run_tag}"
    await herald.send({"business_key": key, "recipient": stranger, "template_id": "class_promotion",
                       "template_version": 1, "render_data": CLASS})  # fmt: skip
    rows.append(DemoRow(key, "class_promotion.v1", None, "marketing without consent: suppressed", stranger))
    return rows


async def _through_the_outbox(herald: HeraldClient, outbox_url: str, run_tag: str) -> DemoRow:
    """A service settles a payment and enqueues its receipt in one transaction; the relay starts it."""
    payment = f"pay_{run_tag}"
    phone = "+1555" + f"{secrets.randbelow(10**7):07d}"
    key = f"order_receipt:{payment}"
    data = {"order_ref": f"ord_{run_tag}", "amount": "42.50", "currency": "EUR", "merchant": "Herald Shop"}
    async with await psycopg.AsyncConnection.connect(outbox_url) as conn, conn.transaction():
        await conn.execute("INSERT INTO payments (id, amount) VALUES (%s, %s)", (payment, "EUR 42.50"))
        await outbox.enqueue(conn, {"business_key": key, "channels": [
            {"channel": "sms", "recipient": phone, "template_id": "order_receipt", "template_version": 1,
             "render_data": data},
        ]})  # fmt: skip
    for _ in range(200):  # the relay wakes on the commit's NOTIFY
        try:
            await herald.status(key)
            break
        except HeraldError:
            await asyncio.sleep(0.05)
    row = DemoRow(key, "order_receipt.v1", None, "through the outbox: committed with the payment", phone)
    row.note = "  started by the outbox relay (enqueued in the payment's transaction)"
    return row


async def _through_the_agent_tool(env: dict[str, str]) -> DemoRow:
    """An agent asks, over MCP, for a waitlisted member's seat offer; twice, as agents do."""
    # The demo service configures who its agent acts for (the tool refuses to start without it);
    # a caller in `env` wins.
    env = {"HERALD_AGENT_CALLER": DEMO_AGENT_CALLER, **env}
    params = StdioServerParameters(command=sys.executable, args=["-m", "agent_tool"], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        arguments = {"class_occurrence_id": "cls_501", "member_id": "mem_7", "action": "seat_opened"}
        for _ in range(2):
            answer = (await session.call_tool("notify_member", arguments)).structured_content or {}
    store = demo_store()
    key = answer.get("business_key", "class_opening:cls_501_mem_7")
    row = DemoRow(key, "class_opening.v1", None, "agent tool over MCP, called twice", store.members["mem_7"].phone)
    row.note = f"  started by the agent tool over MCP (notify_member called twice: {answer.get('outcome')})"
    return row


def _report_csv(run_tag: str) -> str:
    """A small generated sales report: the artifact the report e-mail attaches."""
    lines = ["order_ref,amount,currency"] + [f"ord_{run_tag}_{n},{10 + n}.00,EUR" for n in range(20)]
    return "\n".join(lines) + "\n"


def refused_input_example() -> str:
    """What a caller sees for a bad phone number: one line naming the field and the rule."""
    try:
        parse_request({"business_key": "order_receipt:pay_bad", "recipient": "555-0100", "template_id": "order_receipt",
                       "template_version": 1, "render_data": {}})  # fmt: skip
    except InvalidIntent as error:
        return f"InvalidIntent: {error}"
    return "(no error: this is a bug)"


def summary(rows: list[DemoRow]) -> str:
    known_terminal = [r for r in rows if r.state is not None and r.state.is_terminal and r.state is not IntentState.UNKNOWN]
    delivered = [r for r in rows if r.state is IntentState.DELIVERED]
    duplicates = sum(max(0, r.live_messages - 1) for r in rows)
    lines = [
        f"{'business key':<40} {'ch':<5} {'template':<22} {'fault':<24} {'state':<18} {'att':>3} {'msgs':>4}",
        "-" * 121,
    ]
    for r in (r for r in rows if r.in_table):
        attachment = {None: "", True: "  attachment sha256 verified", False: "  ATTACHMENT MISMATCH"}[r.attachment_verified]
        lines.append(
            f"{r.key:<40} {r.channel.value:<5} {r.template:<22} {r.fault or '-':<24} "
            f"{r.state.value if r.state else '?':<18} {r.attempts:>3} {r.messages_at_provider:>4}{attachment}{r.note}"
        )
    total = len(rows)
    sms = [r for r in rows if r.channel is Channel.SMS]
    emails = [r for r in rows if r.channel is Channel.EMAIL]
    unlisted = sum(not r.in_table for r in rows)
    lines += [
        "-" * 121,
        f"intents: {total} ({len(sms)} SMS, {len(emails)} e-mail"
        + (f"; {unlisted} of them the marketing batch, not listed" if unlisted else "")
        + ")   messages accepted: "
        f"{sum(r.messages_at_provider for r in sms)} at the SMS emulator, "
        f"{sum(r.messages_at_provider for r in emails)} at the SMTP relay   duplicates: {duplicates}",
        f"coverage (known terminal outcome): {100 * len(known_terminal) / total:.1f}%   "
        f"delivered: {100 * len(delivered) / total:.1f}%   unknown: "
        f"{100 * sum(r.state is IntentState.UNKNOWN for r in rows) / total:.1f}%",
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class InboundReplies:
    """Where a member's reply goes: the receipt server the stack started (its /twilio/inbound), and our
    number the reply is addressed to."""

    receipts_url: str
    our_number: str

    @classmethod
    def of(cls, config: StackConfig) -> InboundReplies:
        """The stack's own, from the config it was started with (a moved receipt port moves the reply too)."""
        return cls(f"http://{config.receipts.host}:{config.receipts.port}", config.emulator.from_number)

    @property
    def webhook_url(self) -> str:
        return f"{self.receipts_url}/twilio/inbound"


async def a_stop_reply_suppresses_marketing(
    herald: HeraldClient,
    admin: httpx.AsyncClient,
    ledger: AsyncConnectionPool,
    run_tag: str,
    inbound: InboundReplies,
) -> list[DemoRow]:
    """A member who agreed to marketing texts STOP to our number; the emulator posts the reply, signed,
    to the receipt server's /twilio/inbound as Twilio would, and the next promotion to them is
    suppressed by the policy with nothing sent (issue 24)."""
    member = phone()
    await grant_consent(ledger, fingerprint=herald.keyring.recipient(member), category=Category.MARKETING,
                        source="demo: signup form", granted_at=datetime.now(UTC))  # fmt: skip
    reply = {"from": member, "to": inbound.our_number, "body": "STOP", "url": inbound.webhook_url}
    stop = await admin.post("/_emulator/inbound", json=reply)
    stop.raise_for_status()
    webhook = stop.json()["webhook"]
    key = f"class_promotion:stop_{run_tag}"
    await herald.send({"business_key": key, "recipient": member, "template_id": "class_promotion",
                       "template_version": 1, "render_data": CLASS})  # fmt: skip
    row = DemoRow(key, "class_promotion.v1", None, "member replied STOP: the next promotion suppressed", member)
    if webhook is None or webhook["http_status"] != 200:
        row.note = f"  the receipt server did not take the STOP: {webhook}"
    return [row]


