"""`starter.py send --tenant ID --priority N`: checked by the intent's own rules before anything is
connected to, refused in one line naming the option (never the value), replaced as a whole by
--file (whose JSON may carry both), and shown per attempt by `status --channel`."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.cli import main as starter
from herald.cli import send
from herald.cli import status as status_command
from herald.cli.parser import build_parser, parse_args
from herald.core.contracts import AttemptStatus, IntentStatus
from herald.core.lifecycle import IntentState, SubmitResult
from herald.intake.errors import InvalidIntent
from herald.intake.notice import NoticeRequest
from herald.intake.requests import IntentRequest
from herald.ledger.history import IntentHistory, RecordedAttempt
from herald.runtime import reach
from herald.settings import load_settings
from tests.keys import SESSION_FINGERPRINT_KEYS, SESSION_KEYRING

PHONE = "+15551230001"
RECEIPT = ["send", "--key", "order_receipt:pay_157", "--to", PHONE, "--template", "order_receipt", "--version", "1",
           "--data", "order_ref=ord_1", "--data", "amount=4.50", "--data", "currency=EUR", "--data", "merchant=Shop"]  # fmt: skip
TENANT_RULE = "must be a tenant id: 1 to 48 of a-z, 0-9, '_', '.', '-', starting with a letter or digit"
PRIORITY_RULE = "must be a priority key, a whole number from 1 (first) to 5 (last)"
ORDER = {"order_ref": "ord_1", "amount": "4.50", "currency": "EUR", "merchant": "Shop"}


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every connection the command tries (each refused): none may be tried for refused input."""
    tried: list[str] = []

    async def temporal(*args: Any, **kwargs: Any) -> Any:
        tried.append("temporal")
        raise RuntimeError("Failed client connect: Connection refused")

    monkeypatch.setattr(reach, "connect", temporal)
    env = {"HERALD_TEMPORAL_ADDRESS": "127.0.0.1:1", "HERALD_FINGERPRINT_KEY_FILES": str(SESSION_FINGERPRINT_KEYS)}
    monkeypatch.setattr(starter, "read_settings", lambda env_file: load_settings(env))
    return tried


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = starter.main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err


def test_tenant_and_priority_options_reach_the_request() -> None:
    request = send.send_request(parse_args([*RECEIPT, "--tenant", "acme", "--priority", "4"]), SESSION_KEYRING)
    assert isinstance(request, IntentRequest)
    assert (request.tenant, request.priority) == ("acme", 4)


def test_without_them_the_request_is_the_shared_tenants_at_the_categorys_priority() -> None:
    request = send.send_request(parse_args(RECEIPT), SESSION_KEYRING)
    assert isinstance(request, IntentRequest)
    assert (request.tenant, request.priority) == ("shared", None)


@pytest.mark.parametrize(
    ("option", "value", "line"),
    [
        ("--priority", "9", f"--priority: {PRIORITY_RULE}"),
        ("--priority", "0", f"--priority: {PRIORITY_RULE}"),
        ("--priority", "-1", f"--priority: {PRIORITY_RULE}"),
        ("--priority", "٣", f"--priority: {PRIORITY_RULE}"),
        ("--priority", "3.0", f"--priority: {PRIORITY_RULE}"),
        ("--priority", "", f"--priority: {PRIORITY_RULE}"),
        ("--priority", "9" * 5000, f"--priority: {PRIORITY_RULE}"),
        ("--tenant", "ACME", f"--tenant: {TENANT_RULE}"),
        ("--tenant", "acme corp", f"--tenant: {TENANT_RULE}"),
        ("--tenant", PHONE, f"--tenant: {TENANT_RULE}"),
        ("--tenant", "", f"--tenant: {TENANT_RULE}"),
    ],
)
def test_a_bad_tenant_or_priority_is_one_line_naming_the_option_before_any_connection(
    capsys: pytest.CaptureFixture[str], connections: list[str], option: str, value: str, line: str
) -> None:
    """Refused by the intent's own rule, named as typed (--priority, not priority), exit 2, nothing connected."""
    code, err = cli(capsys, *RECEIPT, option, value)
    assert (code, err) == (2, f"error: {line}\n")
    assert connections == []


def test_file_holds_the_whole_request_so_tenant_and_priority_options_are_refused_with_it(
    capsys: pytest.CaptureFixture[str], connections: list[str], tmp_path: Path
) -> None:
    code, err = cli(capsys, "send", "--file", str(tmp_path / "x.json"), "--tenant", "acme", "--priority", "4")
    assert (code, err) == (2, "error: --file: holds the whole request: leave out --tenant, --priority\n")
    assert connections == []


def test_a_request_file_and_a_notice_file_carry_tenant_and_priority(tmp_path: Path) -> None:
    """A request names its own; a notice names its tenant once and a priority per channel."""
    single = tmp_path / "intent.json"
    single.write_text(json.dumps({"business_key": "order_receipt:pay_9", "recipient": PHONE, "template_id": "order_receipt",
                                  "template_version": 1, "render_data": ORDER, "tenant": "acme", "priority": 3}))  # fmt: skip
    request = send.send_request(parse_args(["send", "--file", str(single)]), SESSION_KEYRING)
    assert isinstance(request, IntentRequest) and (request.tenant, request.priority) == ("acme", 3)
    notice = tmp_path / "notice.json"
    notice.write_text(json.dumps({"business_key": "order_receipt:pay_9", "tenant": "acme", "channels": [
        {"channel": "sms", "recipient": PHONE, "template_id": "order_receipt", "template_version": 1,
         "render_data": ORDER, "priority": 4}]}))  # fmt: skip
    parsed = send.send_request(parse_args(["send", "--file", str(notice)]), SESSION_KEYRING)
    assert isinstance(parsed, NoticeRequest)
    assert [(r.tenant, r.priority) for r in parsed.requests()] == [("acme", 4)]


def test_a_bad_priority_in_a_notice_file_names_its_channel(
    capsys: pytest.CaptureFixture[str], connections: list[str], tmp_path: Path
) -> None:
    path = tmp_path / "notice.json"
    path.write_text(json.dumps({"business_key": "order_receipt:pay_9", "channels": [
        {"channel": "sms", "recipient": PHONE, "template_id": "order_receipt", "template_version": 1,
         "render_data": ORDER, "priority": "4"}]}))  # fmt: skip
    code, err = cli(capsys, "send", "--file", str(path))
    assert (code, err) == (2, f"error: channels.0.priority: {PRIORITY_RULE}\n")
    assert connections == []


_TENANT = re.compile(r"[a-z0-9][a-z0-9_.-]{0,47}")
typed = st.text(max_size=50) | st.sampled_from(
    ["1", "5", "6", "05", "-1", "-a", "acme", "t-1.b_2", "+15551230001", "²", "٣"]
)


@given(tenant=st.none() | typed, priority=st.none() | typed)
def test_any_typed_tenant_and_priority_are_taken_exactly_in_their_shapes(
    tenant: str | None, priority: str | None
) -> None:
    """Whatever is typed: accepted exactly when the tenant is an id and the priority ASCII digits
    for 1..5; otherwise refused naming each bad option, and never repeating what was typed."""
    # OPTION=VALUE, so a typed value starting with '-' is the option's value, as a shell user would quote it.
    argv = [*RECEIPT, *([f"--tenant={tenant}"] if tenant is not None else []),
            *([f"--priority={priority}"] if priority is not None else [])]  # fmt: skip
    tenant_ok = tenant is None or _TENANT.fullmatch(tenant) is not None
    priority_ok = priority is None or (re.fullmatch(r"[0-9]{1,16}", priority) is not None and 1 <= int(priority) <= 5)
    args = parse_args(argv)
    if tenant_ok and priority_ok:
        request = send.send_request(args, SESSION_KEYRING)
        assert isinstance(request, IntentRequest)
        assert (request.tenant, request.priority) == (tenant or "shared", None if priority is None else int(priority))
        return
    with pytest.raises(InvalidIntent) as refused:
        send.send_request(args, SESSION_KEYRING)
    expected = {("--tenant", TENANT_RULE)} if not tenant_ok else set()
    expected |= {("--priority", PRIORITY_RULE)} if not priority_ok else set()
    assert set(refused.value.problems) == expected


def test_help_shows_the_options_and_an_example_with_them() -> None:
    text = build_parser()._subparsers._group_actions[0].choices["send"].format_help()  # type: ignore[union-attr]
    assert "--tenant ID" in text and "--priority N" in text
    assert "--tenant acme --priority 4" in text


class _Runtime:
    """What `status --channel` asks of the process runtime, without the ledger."""

    def database_url(self) -> None:
        return None


async def test_status_shows_each_attempts_priority_key_and_weight(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    at = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    status = IntentStatus(
        workflow_id="order_receipt:pay_1/sms", business_key="order_receipt:pay_1", channel="sms",
        template_id="order_receipt", template_version=1, content_sha256="ab" * 32, state=IntentState.DELIVERED,
        attempts=[AttemptStatus(number=1, attempt_ref="att_1", started_at=at, submit_result=SubmitResult.ACCEPTED,
                                priority=4, fairness_weight=3.0),
                  AttemptStatus(number=2, attempt_ref="att_2", started_at=at)],
    )  # fmt: skip
    async def client(runtime: Any) -> Any:
        async def answer(key: str, channel: str) -> IntentStatus:
            return status

        return SimpleNamespace(status=answer)

    monkeypatch.setattr(status_command, "herald_client", client)
    args = parse_args(["status", "order_receipt:pay_1", "--channel", "sms"])
    assert await status_command.cmd_status(args, _Runtime()) == 0  # type: ignore[arg-type]
    attempts = [line for line in capsys.readouterr().out.splitlines() if line.startswith("attempt ")]
    assert "   priority 4 weight 3" in attempts[0]
    assert "priority" not in attempts[1]


def test_status_prints_each_attempts_provider_policy_and_route_reason(capsys: pytest.CaptureFixture[str]) -> None:
    """`status --channel` lists the ledger's attempts with the provider, the policy version that admitted
    each and the route's reason, so a failover reads as one line per attempt; an attempt from before
    routes says none was recorded."""
    at = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)
    history = IntentHistory(
        workflow_id="intent:order_receipt:pay_157:sms", business_key="order_receipt:pay_157", channel="sms",
        template_id="order_receipt", template_version=1, content_sha256="0" * 64, intent_fingerprint="f" * 64,
        recipient_fingerprint=None, created_at=at, expires_at=at,
        attempts=[
            RecordedAttempt(workflow_id="intent:order_receipt:pay_157:sms", number=1, attempt_ref="a1", prepared_at=at, provider="twilio", policy_version=3,
                            route_reason="route sms/US v3: twilio, infobip; twilio first"),
            RecordedAttempt(workflow_id="intent:order_receipt:pay_157:sms", number=2, attempt_ref="a2", prepared_at=at, provider="infobip", policy_version=3,
                            route_reason="twilio proven not to have it (attempt 1 unreachable): next is infobip"),
            RecordedAttempt(workflow_id="intent:order_receipt:pay_157:sms", number=3, attempt_ref="a3", prepared_at=at, provider=None),
        ],
    )  # fmt: skip
    status_command._print_history(history, [])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "attempts (ledger):"
    assert lines[1].split()[0] == "1" and "twilio policy v3: route sms/US v3: twilio, infobip; twilio first" in lines[1]
    assert lines[2].split()[0] == "2" and "infobip policy v3: twilio proven not to have it" in lines[2]
    assert lines[3].split()[0] == "3" and lines[3].endswith(" -: no route recorded")
    assert lines[4] == "transitions (ledger):"
