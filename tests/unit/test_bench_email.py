"""The e-mail bench's wiring: its flags and results file, each variant's processes, the events the bench
posts as SendGrid (Herald's receipt check takes them for its attempt), the receiver routing the ESP's
events by the unique args the floor and naive messages carry, and Herald/floor stated for every pass."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives import serialization
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from bench.__main__ import RESULTS, parse_args
from bench.common import HistoryFigures, Phase, completed_latencies
from bench.context import EMAIL_ROLES
from bench.email_bench import EMAIL_RESULTS, EMAIL_RUNNERS, NOTICE_RUNNERS
from bench.email_report import _ratios
from bench.floor_email import email_message
from bench.context import NOTICE_ROLES
from bench.receiver import Receiver
from bench.sendgrid_play import delivered_posts
from emulator.esp.events import event_body, webhook_body
from emulator.esp.messages import MessageRecord, RecipientRecord, parse_message
from herald.providers.sendgrid_events import REFERENCE_ARG
from herald.providers.sendgrid_signature import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    load_public_key,
    new_private_key,
    public_key_text,
    sign,
)
from herald.receipts.sendgrid_posts import prepare_post, signed_post_refusal

COMPLETED = "WORKFLOW_EXECUTION_COMPLETED"


def test_the_email_flags_write_their_own_file_and_leave_the_sms_defaults_alone() -> None:
    """`--channel email` writes bench/RESULTS-email.md; no flag is the SMS bench as before; `--notice` needs e-mail."""
    email, sms = parse_args(["--channel", "email", "--notice"]), parse_args([])
    assert (email.results, email.notice) == (EMAIL_RESULTS, True)
    assert (sms.channel, sms.results, sms.notice) == ("sms", RESULTS, False)
    with pytest.raises(SystemExit):
        parse_args(["--notice"])


def test_each_email_variant_runs_on_the_email_channel_against_its_own_esp() -> None:
    """Herald's events come from the stack's ESP; naive's and the floor's from the bench's, to its receiver."""
    assert set(EMAIL_RUNNERS) == {"naive", "floor", "herald"}
    assert all(runner.keywords == {"channel": "email"} for runner in EMAIL_RUNNERS.values())
    assert {name: roles["emulator"] for name, roles in EMAIL_ROLES.items()} == {
        "naive": "esp_bench", "floor": "esp_bench", "herald": "esp"}  # fmt: skip
    assert EMAIL_ROLES["floor"]["worker"] == "floor_email_worker"
    assert {name: runner.keywords for name, runner in NOTICE_RUNNERS.items()} == {
        "floor": {"channel": "notice"}, "herald": {"channel": "notice"}}  # fmt: skip
    assert NOTICE_ROLES["floor"]["worker"] == ("floor_worker", "floor_email_worker")
    assert NOTICE_ROLES["herald"]["emulator"] == ("emulator", "esp")


@pytest.fixture
def signing(tmp_path: Path) -> tuple[SimpleNamespace, str]:
    """A stand-in bench whose stack's ESP signing key is a fresh one, and that key's public half."""
    key = new_private_key()
    path = tmp_path / "esp-signing-key.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))  # fmt: skip
    bench = SimpleNamespace(stack=SimpleNamespace(config=SimpleNamespace(esp_signing_key_path=path)))
    return bench, public_key_text(key)


def test_the_report_path_posts_are_signed_events_herald_takes_for_the_parked_attempt(signing) -> None:
    """A post the bench makes as SendGrid passes the receipt server's check and becomes a `delivered`
    inbox row for the attempt and Message-ID the ESP listed."""
    bench, public_key = signing
    listed = [{"message_id": "<att_1@herald.test>", "unique_args": {REFERENCE_ARG: "att_1"},
               "recipients": [{"email": "member@example.com", "sg_message_id": "x.recvd-1-0.0"}]}]  # fmt: skip
    [(url, make)] = delivered_posts(bench, listed, "http://127.0.0.1:1/sendgrid/events")
    request = make()

    assert url.endswith("/sendgrid/events")
    assert signed_post_refusal(load_public_key(public_key), request["headers"], request["content"]) is None
    [row] = prepare_post(request["content"]).reports
    assert (row.attempt_ref, row.provider_message_id, row.provider_status) == (
        "att_1",
        "<att_1@herald.test>",
        "delivered",
    )


class _Handle:
    def __init__(self, signalled: list, workflow_id: str) -> None:
        self._signalled, self._workflow_id = signalled, workflow_id

    async def signal(self, _signal, status: str) -> None:
        self._signalled.append((self._workflow_id, status))


def test_the_receiver_routes_esp_events_by_the_unique_args_the_bench_messages_carry(signing) -> None:
    """The floor's message signals its workflow on `delivered`, the naive one inserts its row, `processed`
    does neither, and an unsigned post is refused: the events as the ESP builds them from the messages."""
    bench, public_key = signing
    signalled: list[tuple[str, str]] = []
    inserted: list[tuple[str, str]] = []
    client = SimpleNamespace(get_workflow_handle=lambda workflow_id: _Handle(signalled, workflow_id))
    receiver = Receiver("token", public_key, "http://127.0.0.1:1", client, pool=None)  # type: ignore[arg-type]

    async def insert(intent_id: str, provider_sid: str | None, status: str) -> None:
        inserted.append((intent_id, status))

    receiver._insert = insert  # type: ignore[method-assign]
    app = Starlette(routes=[Route("/sendgrid", receiver.sendgrid, methods=["POST"])])
    key = serialization.load_pem_private_key(bench.stack.config.esp_signing_key_path.read_bytes(), password=None)
    with TestClient(app) as http:
        for variant, ref in (("floor", "floor-email-abc-1"), ("naive", "naive-abc-1")):
            message = email_message("notifications@example.com", "member@example.com", "Hello", ref, variant)
            record = MessageRecord(seq=1, x_message_id="x", mail_from="notifications@example.com",
                                   accepted_at=None, fault=None, client_ip=None,  # type: ignore[arg-type]
                                   parsed=parse_message(message.as_bytes(), "x", 1000),
                                   recipients=[RecipientRecord("member@example.com", "x.recvd-1-0.0", None)])  # fmt: skip
            for kind in ("processed", "delivered"):
                body = webhook_body(event_body(record, record.recipients[0], kind, {}))
                stamp = str(int(time.time()))
                answer = http.post("/sendgrid", content=body, headers={SIGNATURE_HEADER: sign(key, body, stamp),
                                                                       TIMESTAMP_HEADER: stamp})  # fmt: skip
                assert answer.status_code == 200
        forged = http.post("/sendgrid", content=json.dumps([{"event": "delivered"}]).encode(),
                           headers={SIGNATURE_HEADER: "AAAA", TIMESTAMP_HEADER: str(int(time.time()))})  # fmt: skip

    assert signalled == [("floor-email-abc-1", "delivered")]
    assert inserted == [("naive-abc-1", "delivered")]
    assert forged.status_code == 403


def _round(variant: str, completed: int, span: float, cpu: float, actions: int) -> Phase:
    phase = Phase(variant=variant, offered_rate=None, intents=completed, completed=completed)
    phase.first_start, phase.last_end = 0.0, span
    phase.cpu = {"worker": cpu}
    phase.actions = Counter({"activity": actions})
    return phase


def test_every_pass_states_herald_over_floor_for_rate_cpu_and_actions_with_the_rounds_range() -> None:
    """Pooled Herald/floor for intents/s, CPU and actions per intent, each with the rounds' median and range."""
    rounds = {
        "floor": [_round("floor", 100, 10.0, 5.0, 400), _round("floor", 100, 10.0, 5.0, 400)],
        "herald": [_round("herald", 100, 12.5, 6.0, 550), _round("herald", 100, 10.0, 5.5, 550)],
    }
    pooled = {name: Phase.pooled(phases) for name, phases in rounds.items()}

    assert _ratios("throughput pass", pooled, rounds) == (
        "- throughput pass: Herald/floor intents/s **0.89×** (rounds: median 0.90×, range 0.80–1.00×);"
        " CPU per intent **1.15×** (rounds: median 1.15×, range 1.10–1.20×);"
        " billable actions per intent **1.38×** (rounds: median 1.38×, range 1.38–1.38×)"
    )


def test_a_notice_is_done_when_both_channels_completed_at_the_later_close() -> None:
    """Grouped by notice, a notice's latency ends at its later workflow's close; one failed channel leaves it undone."""
    figures = HistoryFigures(
        ends={"n-1-sms": 11.0, "n-1-email": 12.5, "n-2-sms": 13.0, "n-2-email": 14.0},
        closed_as={"n-1-sms": COMPLETED, "n-1-email": COMPLETED, "n-2-sms": COMPLETED, "n-2-email": "WORKFLOW_EXECUTION_FAILED"},
        events=40,
        actions=Counter({"activity": 8}),
        close_events=Counter({COMPLETED: 3, "WORKFLOW_EXECUTION_FAILED": 1}),
    )  # fmt: skip
    phase = Phase(variant="floor", offered_rate=None, intents=2)
    completed_latencies(phase, {"n-1": 10.0, "n-2": 10.0}, figures, group=lambda w: w.rsplit("-", 1)[0])

    assert (phase.completed, phase.latencies, phase.last_end) == (1, [2.5], 12.5)
