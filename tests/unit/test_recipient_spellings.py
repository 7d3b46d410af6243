"""Every spelling of a recipient, at every door: refused naming the field, or the one canonical form.

The review's finding: ``"+15552600018\\n"`` passed IntentRequest, ``starter.py send`` and the outbox
relay (``re.match`` with a pattern ending in ``$``), its fingerprint was not the number's, a STOP
from the number did not stop a marketing text and erasing the number erased nothing. Here each
door is called as a service, an operator or Twilio reaches it (the client with a stand-in Temporal,
the outbox's enqueue and relay with stand-in databases, the agent tool with a record holding the
spelling, starter.py's parser, the inbound route's checks, the fingerprints erase and the policy
gate take), over spellings hypothesis builds: whitespace and line ends anywhere, Unicode digits,
full-width plus, separators, leading 00, letters, extensions, and free text.
"""

from __future__ import annotations

import asyncio
import json
import re
import unicodedata
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_tool.store import demo_store
from agent_tool.tools import CALLERS, AgentTools, MemberAction, Refused, Started
from herald import outbox
from herald.cli import input as cli_input
from herald.cli.input import CliInputError
from herald.cli.parser import parse_args
from herald.cli.send import send_request
from herald.client import HeraldClient
from herald.core import recipients
from herald.core.intent import Intent
from herald.intake.errors import InvalidIntent
from herald.intake.notice import parse_notice
from herald.intake.requests import parse_request
from herald.outbox.erasure import names
from herald.outbox.relay import OutboxRelay
from herald.privacy import fingerprints
from herald.receipts.twilio_inbound import recipient_request, unusable_reason
from tests.depth import examples
from tests.keys import SESSION_KEYRING

PROPERTY = settings(derandomize=True, database=None, max_examples=examples(400), deadline=None)

# Possible numbers (phonenumbers' "possible": a length the country's plan allows), fictional where
# the plan has a fictional range: the demo's 555, the UK's drama range.
FINDING = "+15552600018"
NUMBERS = [FINDING, "+15551230001", "+447700900123", "+33612345678", "+4915123456789",
           "+8613812345678", "+61412345678", "+5511987654321", "+819012345678", "+2348031234567"]  # fmt: skip
# The zero of each script's decimal digits (Unicode category Nd, 0-9 in a row).
ZEROS = {
    "ascii": 0x30, "arabic-indic": 0x660, "extended arabic-indic": 0x6F0, "nko": 0x7C0, "devanagari": 0x966,
    "bengali": 0x9E6, "thai": 0xE50, "full-width": 0xFF10, "mathematical bold": 0x1D7CE,
}  # fmt: skip
PLUSES = ["+", "\uff0b"]  # what the rule reads as the plus
NOT_PLUSES = ["", "00", "011", "++", "\ufe62", "\u207a", "+\uff0b"]  # small and superscript plus, doubled
SEPARATORS = [" ", "-", ".", "(", ")"]
NOISE = [
    "\n", "\r", "\r\n", "\t", "\v", "\f", "\x85", "\u2028", "\u2029", "\x00",  # line ends and controls
    "\u00a0", "\u2009", "\u3000", "\u200b",  # other spaces, a zero-width one
    "/", "\uff0d", "\u2010", "\u2212", "\uff08",  # separators the rule does not read
    "x12", ";ext=12", "#", "*", "tel:", "a", "\u00b2",  # extensions, letters, a superscript digit
]  # fmt: skip
LINE_ENDS = re.compile("[\n\r\v\f\x85\u2028\u2029]")
E164 = re.compile(r"\+[1-9][0-9]{7,14}")


@dataclass(frozen=True)
class Spelling:
    """A spelling of `number`, and what the written rule says it must become (None: refused)."""

    text: str
    number: str
    expected: str | None


@st.composite
def spellings(draw: st.DrawFn) -> Spelling:
    """A number from NUMBERS spelt with a plus (or not), digits in one script or mixed, and
    insertions anywhere (before the plus, between the digits, after the last): separators or noise."""
    number = draw(st.sampled_from(NUMBERS))
    plus_ok = draw(st.booleans())
    plus = draw(st.sampled_from(PLUSES if plus_ok else NOT_PLUSES))
    if draw(st.booleans()):
        scripts = [draw(st.sampled_from(sorted(ZEROS)))] * (len(number) - 1)
    else:
        scripts = draw(st.lists(st.sampled_from(sorted(ZEROS)), min_size=len(number) - 1, max_size=len(number) - 1))
    digits = [chr(ZEROS[script] + int(d)) for script, d in zip(scripts, number[1:], strict=True)]
    tokens = [plus, *digits]
    # Insertion points: 0 is before the plus, len(tokens) after the last digit.
    inserted = draw(st.lists(st.tuples(st.integers(0, len(tokens)), st.sampled_from(SEPARATORS + NOISE)), max_size=4))
    for position, text in sorted(inserted, reverse=True):
        tokens.insert(position, text)
    # The rule, written out: a plus first, a digit last, and only the separators in between.
    inside = all(0 < position < len(digits) + 1 for position, _ in inserted)
    follows_rule = plus_ok and inside and all(text in SEPARATORS for _, text in inserted)
    return Spelling("".join(tokens), number, number if follows_rule else None)


# Text built from the characters that matter, and any text at all.
_INTERESTING = st.sampled_from(
    [chr(ZEROS[s] + d) for s in ZEROS for d in (0, 1, 5, 9)] + PLUSES + NOT_PLUSES + SEPARATORS + NOISE
)
# Without '@': text with one is an e-mail address to the doors that take either (the last test).
free_text = st.one_of(st.text(max_size=30), st.lists(_INTERESTING, max_size=24).map("".join)).filter(
    lambda text: "@" not in text
)


# --- the doors ---------------------------------------------------------------------------------
# Each takes a spelling and answers ("accepted", canonical or None, fingerprint) or ("refused", the
# refusal's text). The text must name the door's field; the canonical form and the fingerprint are
# what that door would store and compare.

Answer = tuple[str, str | None, str | None]
RECEIPT_DATA = {"order_ref": "A-1", "amount": "12.50", "currency": "EUR", "merchant": "Acme"}


def _request(recipient: str) -> dict[str, Any]:
    return {"business_key": "order_receipt:pay_1", "recipient": recipient, "template_id": "order_receipt",
            "template_version": 1, "render_data": dict(RECEIPT_DATA)}  # fmt: skip


def _notice(recipient: str) -> dict[str, Any]:
    entry = {"channel": "sms", "recipient": recipient, "template_id": "order_receipt", "template_version": 1,
             "render_data": dict(RECEIPT_DATA)}  # fmt: skip
    return {"business_key": "order_receipt:pay_1", "channels": [entry]}


class _Temporal:
    """Stands in for temporalio's Client: keeps each started intent; every start is a new workflow."""

    def __init__(self) -> None:
        self.started: list[Intent] = []

    async def start_workflow(self, workflow: Any, arg: Any, **kwargs: Any) -> Any:
        self.started.append(arg.intent)
        return SimpleNamespace(_start_workflow_response=SimpleNamespace(started=True), result_run_id="run")

    def get_workflow_handle(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no Temporal server in a unit test")


class _Database:
    """Stands in for a pool and its connection: keeps each statement's parameters."""

    def __init__(self) -> None:
        self.params: list[Any] = []

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[_Database]:
        yield self

    async def execute(self, sql: str, params: Any) -> Any:
        self.params.append(params)
        return SimpleNamespace(fetchone=_one_row)


async def _one_row() -> tuple[int]:
    return (1,)


def _started(temporal: _Temporal) -> Answer:
    [intent] = temporal.started
    return "accepted", intent.message.recipient, intent.recipient_fingerprint


def door_intent_request(text: str) -> Answer:
    try:
        request = parse_request(_request(text))
    except InvalidIntent as refused:
        return "refused", None, str(refused)
    return "accepted", request.recipient, SESSION_KEYRING.recipient(request.recipient)


def door_client(text: str) -> Answer:
    temporal = _Temporal()
    try:
        asyncio.run(HeraldClient(temporal, "q", keyring=SESSION_KEYRING).send(_request(text)))  # type: ignore[arg-type]
    except InvalidIntent as refused:
        return "refused", None, str(refused)
    return _started(temporal)


def door_notice(text: str) -> Answer:
    try:
        notice = parse_notice(_notice(text))
    except InvalidIntent as refused:
        return "refused", None, str(refused)
    [request] = notice.requests()
    assert request.recipient == notice.channels[0].recipient
    return "accepted", request.recipient, SESSION_KEYRING.recipient(request.recipient)


def door_enqueue(text: str) -> Answer:
    database = _Database()
    try:
        asyncio.run(outbox.enqueue(database, _notice(text)))  # type: ignore[arg-type]
    except InvalidIntent as refused:
        return "refused", None, str(refused)
    [(_, stored)] = database.params
    stored_recipient = stored.obj["channels"][0]["recipient"]
    return "accepted", stored_recipient, SESSION_KEYRING.recipient(stored_recipient)


def door_relay(text: str) -> Answer:
    """A row as a service wrote it (even without enqueue), claimed by the relay."""
    temporal, database = _Temporal(), _Database()
    relay = OutboxRelay(database, HeraldClient(temporal, "q", keyring=SESSION_KEYRING))  # type: ignore[arg-type]
    outcome = asyncio.run(relay._relay({"id": 1, "tries": 1, "notice": json.dumps(_notice(text))}))
    if outcome == "refused":
        [(state, reason, *_)] = database.params
        return "refused", None, reason
    assert outcome == "relayed", outcome
    return _started(temporal)


def door_agent_tool(text: str) -> Answer:
    """The agent tool takes no number from the model: the member's record holds the spelling."""
    store = demo_store()
    store = replace(store, members={**store.members, "mem_9": replace(store.members["mem_9"], phone=text)})
    temporal = _Temporal()
    herald = HeraldClient(temporal, "q", keyring=SESSION_KEYRING)  # type: ignore[arg-type]
    tools = AgentTools(store, herald, CALLERS["eu-marketplace-agent"])
    answer = asyncio.run(tools.notify_member("cls_502", "mem_9", MemberAction.CLASS_CANCELLED))
    if isinstance(answer, Refused):
        assert answer.code == "refused_by_herald", answer
        return "refused", None, answer.message
    assert isinstance(answer, Started)
    return _started(temporal)


def door_starter_send(text: str) -> Answer:
    args = parse_args(["send", "--key", "order_receipt:pay_1", f"--to={text}", "--template", "order_receipt",
                       "--version", "1", "--data", "order_ref=A-1", "--data", "amount=12.50",
                       "--data", "currency=EUR", "--data", "merchant=Acme"])  # fmt: skip
    try:
        request = send_request(args, SESSION_KEYRING)
    except InvalidIntent as refused:
        return "refused", None, str(refused)
    assert not hasattr(request, "channels")
    return "accepted", request.recipient, SESSION_KEYRING.recipient(request.recipient)  # type: ignore[union-attr]


def _cli_door(channel: str | None) -> Callable[[str], Answer]:
    """consent grant, suppression list and lift, erase: RECIPIENT, then the fingerprints they look up."""

    def door(text: str) -> Answer:
        try:
            recipient = cli_input.recipient(text, "RECIPIENT", channel)
        except CliInputError as refused:
            return "refused", None, str(refused)
        # erase: the ledger's candidates and canonical form (herald.ledger.privacy, recipient_intents).
        candidates = SESSION_KEYRING.recipient_candidates(recipient)
        assert fingerprints.canonical_recipient(recipient) == recipient
        return "accepted", recipient, candidates[0]

    return door


def door_inbound(text: str) -> Answer:
    fields = {"MessageSid": "SM" + "0" * 32, "From": text}
    reason = unusable_reason(fields)
    if reason is not None:
        return "refused", None, reason
    return (
        "accepted",
        None,
        recipient_request(fields, "opt_out", "STOP", datetime.now(UTC), SESSION_KEYRING).fingerprint,
    )


def door_fingerprint(text: str) -> Answer:
    """What the policy gate (policy_store.recipient_fingerprint) and the vault fingerprint: canonical
    inside; a spelling no door reads has no fingerprint at all."""
    try:
        fingerprint = SESSION_KEYRING.recipient(text)
    except recipients.RecipientRefused as refused:
        return "refused", None, f"recipient: {refused.rule}"
    assert SESSION_KEYRING.recipient_candidates(text)[0] == fingerprint
    return "accepted", fingerprints.canonical_recipient(text), fingerprint


DOORS: dict[str, tuple[Callable[[str], Answer], str]] = {
    "IntentRequest": (door_intent_request, "recipient: "),
    "HeraldClient.send": (door_client, "recipient: "),
    "notice entry": (door_notice, "channels.0.recipient: "),
    "outbox enqueue": (door_enqueue, "channels.0.recipient: "),
    "outbox relay": (door_relay, "channels.0.recipient: "),
    "agent tool": (door_agent_tool, "recipient: "),
    "starter.py send --to": (door_starter_send, "--to: "),
    "consent/erase RECIPIENT": (_cli_door(None), "RECIPIENT: "),
    "suppression RECIPIENT --channel sms": (_cli_door("sms"), "RECIPIENT: "),
    "inbound From": (door_inbound, "From: "),
    "fingerprint (gate, vault)": (door_fingerprint, "recipient: "),
}


def _ascii_digits(text: str) -> str:
    return "".join(str(unicodedata.decimal(char)) for char in text if char.isdecimal())


def _check_every_door(text: str) -> str | None:
    """Run every door on `text`: each refuses naming its field without the value, or accepts the one
    canonical number with its fingerprint; all doors answer alike. Returns the canonical form or None."""
    answers = {name: door(text) for name, (door, _) in DOORS.items()}
    for name, (outcome, canonical, detail) in answers.items():
        if outcome == "refused":
            assert detail is not None and detail.startswith(DOORS[name][1]), (name, detail)
            assert "E.164" in detail, (name, detail)
            digits = _ascii_digits(text)
            assert len(digits) < 6 or digits not in detail, (name, "the number is echoed")
            # Only text that could be a person's (a digit, a plus, an '@'): plain words such as "code" may
            # stand in the rule's own wording ("country code") without anything being echoed.
            personal = any(char.isdecimal() or char in "+@" for char in text)
            assert not personal or len(text.strip()) < 4 or text not in detail, (name, "the value is echoed")
    outcomes = {name: answer[0] for name, answer in answers.items()}
    assert len(set(outcomes.values())) == 1, f"the doors disagree: {outcomes}"
    if outcomes["IntentRequest"] == "refused":
        return None
    found = {answer[1] for answer in answers.values() if answer[1] is not None}
    assert len(found) == 1, f"the doors stored different forms: {answers}"
    [canonical] = found
    assert E164.fullmatch(canonical), canonical
    fingerprint = SESSION_KEYRING.recipient(canonical)
    assert {answer[2] for answer in answers.values()} == {fingerprint}, "a door fingerprints another person"
    return canonical


@PROPERTY
@given(spelling=spellings())
@example(Spelling("+15552600018\n", FINDING, None))  # the review's reproduction
@example(Spelling("+1 (555) 260-0018", FINDING, FINDING))
@example(Spelling("\uff0b\uff11\uff15\uff15\uff15\uff12\uff16\uff10\uff10\uff10\uff11\uff18", FINDING, FINDING))
@example(Spelling("+\u0661\u0665\u0665\u0665\u0662\u0666\u0660\u0660\u0660\u0661\u0668", FINDING, FINDING))
@example(Spelling("0015552600018", FINDING, None))
def test_every_door_refuses_a_spelling_or_reads_it_as_the_one_number(spelling: Spelling) -> None:
    """A number spelt any way is refused at every door naming the field, or read at every door as the
    number itself (one stored form, one fingerprint): exactly as the written rule says."""
    assert _check_every_door(spelling.text) == spelling.expected


@PROPERTY
@given(text=free_text)
@example("+15552600018\r\n")
@example(" +15552600018")
@example("+861234567890123")  # phonenumbers would read it as +86 67890123: another number
@example("+15551234")  # possible only as a local number
def test_any_text_is_refused_or_read_as_its_own_digits_alike_at_every_door(text: str) -> None:
    """Free text: every door answers alike; what is accepted is E.164 holding exactly the text's digits,
    begins with a plus and ends with a digit; a line end anywhere is always refused."""
    canonical = _check_every_door(text)
    if canonical is not None:
        assert canonical == "+" + _ascii_digits(text)
        assert text[0] in PLUSES and text[-1].isdecimal()
        assert not LINE_ENDS.search(text)


@PROPERTY
@given(spelling=spellings())
def test_erasing_the_number_reaches_an_outbox_row_in_any_spelling_that_holds_it(spelling: Spelling) -> None:
    """The outbox erasure's match (herald.outbox.erasure.names) finds every spelling the doors read as
    the number, and a row the relay refused for surrounding whitespace only."""
    if spelling.expected is not None:
        assert names(spelling.text, spelling.number)
    if names(spelling.text, spelling.number):
        assert recipients.sms_number(spelling.text.strip()) == spelling.number


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("alice@example.com", "alice@example.com"),
        ("alice@Example.COM", "alice@example.com"),
        ("Alice@EXAMPLE.com", "Alice@example.com"),
        ("alice@ｅｘａｍｐｌｅ.com", "alice@example.com"),
        ("alice@example.com\n", None),
        (" alice@example.com", None),
        ("alice@example.com ", None),
        ("alice@exa\nmple.com", None),
        ("alice@example.com\u2028", None),
    ],
)
def test_an_address_is_read_alike_at_every_door(spelling: str, canonical: str | None) -> None:
    """An e-mail address: email-validator's normalised form at the intent, the notice, starter.py's
    RECIPIENT and the outbox; whitespace and line ends anywhere refused naming the field; consent,
    suppression and erasure find one person whatever the case."""
    read: set[str | None] = set()
    try:
        read.add(parse_request({**_request(spelling), "channel": "email",
                                "template_id": "order_receipt_email"}).recipient)  # fmt: skip
    except InvalidIntent as refused:
        assert str(refused).startswith("recipient: must be an e-mail address") and spelling not in str(refused)
        read.add(None)
    try:
        entry = {**_notice(spelling)["channels"][0], "channel": "email", "template_id": "order_receipt_email"}
        read.add(parse_notice({"business_key": "order_receipt:pay_1", "channels": [entry]}).channels[0].recipient)
    except InvalidIntent as refused:
        assert str(refused).startswith("channels.0.recipient: must be an e-mail address")
        read.add(None)
    for channel in (None, "email"):
        try:
            read.add(cli_input.recipient(spelling, "RECIPIENT", channel))
        except CliInputError as refused:
            assert refused.field == "RECIPIENT" and spelling not in str(refused)
            read.add(None)
    assert read == {canonical}
    if canonical is not None:
        ring = SESSION_KEYRING
        assert ring.recipient(canonical) == ring.recipient(canonical.lower()) == ring.recipient(spelling)
