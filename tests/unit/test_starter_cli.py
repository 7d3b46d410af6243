"""starter.py as a caller meets it: bad input is one line naming the option and the rule, exit 2,
never the value typed, and nothing is connected to before every input has been checked."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

from herald.cli import input as cli_input
from herald.cli import main as starter
from herald.cli import parser as cli_parser
from herald.cli.input import CliInputError
from herald.core.recipients import NUMBER_RULE
from herald.runtime import reach
from herald.runtime.process import ProcessRuntime
from herald.settings import load_settings
from tests.keys import SESSION_FINGERPRINT_KEYS

# The command line's own reading of settings, before a test replaces it (use_env).
READ_SETTINGS = starter.read_settings
UNREACHABLE = {
    "HERALD_TEMPORAL_ADDRESS": "127.0.0.1:1", "DATABASE_URL": "postgresql://herald@127.0.0.1:1/herald",
    "HERALD_FINGERPRINT_KEY_FILES": str(SESSION_FINGERPRINT_KEYS),
}  # fmt: skip
PHONE = "+15551230001"
RECEIPT = ["send", "--key", "order_receipt:pay_157", "--to", PHONE, "--template", "order_receipt", "--version", "1",
           "--data", "order_ref=ord_1", "--data", "currency=EUR", "--data", "merchant=Shop"]  # fmt: skip
NEW_ORDER = ["send", "--key", "seller_new_order:ord_9", "--to", PHONE, "--template", "seller_new_order", "--version", "2",
             "--data", "order_ref=ord_9", "--data", "order_total=EUR 18.00"]  # fmt: skip


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every connection the command tries, each failing as an unreachable service would."""
    tried: list[str] = []

    async def temporal(*args: Any, **kwargs: Any) -> Any:
        tried.append("temporal")
        raise RuntimeError('Failed client connect: tcp connect error, Os { code: 111, message: "Connection refused" }')

    async def database(*args: Any, **kwargs: Any) -> Any:
        tried.append("database")
        raise psycopg.OperationalError(
            'connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused'
        )

    monkeypatch.setattr(reach, "connect", temporal)
    monkeypatch.setattr(psycopg.AsyncConnection, "connect", database)
    use_env(monkeypatch, UNREACHABLE)
    return tried


def use_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """Settings from `env` alone (not the developer's shell or a running stack's stack.env)."""
    monkeypatch.setattr(starter, "read_settings", lambda env_file: load_settings(env))


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = starter.main(list(argv))
    except SystemExit as exit_:  # argparse's own refusals
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def assert_refused(err: str, out: str, *, starts: str, hidden: tuple[str, ...] = ()) -> None:
    """One line on stderr beginning with `starts`, no traceback, none of `hidden` anywhere."""
    assert err.startswith(f"error: {starts}"), err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    for value in hidden:
        assert value not in err and value not in out, value


def test_a_superscript_digit_in_data_is_one_line_without_the_value(capsys: Any, attempts: list[str]) -> None:
    """`--data amount=²` (str.isdigit() is true, int() refuses it) names the field and rule, exit 2, no connection."""
    code, out, err = cli(capsys, *RECEIPT, "--data", "amount=²")
    assert code == 2
    assert_refused(err, out, starts="render_data.amount: ", hidden=("²",))
    assert attempts == []


def test_arabic_indic_digits_for_an_int_field_are_refused(capsys: Any, attempts: list[str]) -> None:
    """`item_count=٣` is not silently read as 3: an int field takes ASCII digits only."""
    code, out, err = cli(capsys, *NEW_ORDER, "--data", "item_count=٣")
    assert code == 2
    assert_refused(err, out, starts="render_data.item_count: must be a whole number in ASCII digits 0-9", hidden=("٣",))
    assert attempts == []


def test_a_valid_request_is_checked_first_then_reported_unreachable(capsys: Any, attempts: list[str]) -> None:
    """Valid input with Temporal down is exit 1, one line naming the setting, after one connection attempt."""
    code, _, err = cli(capsys, *NEW_ORDER, "--data", "item_count=3")
    assert code == 1
    assert err == "error: cannot reach Temporal at 127.0.0.1:1 (HERALD_TEMPORAL_ADDRESS): Connection refused\n"
    assert attempts == ["temporal"]


def test_render_data_converts_only_int_fields_and_keeps_text_as_typed() -> None:
    """An int field's ASCII digits become an int; text, "007", long digit runs and Arabic digits in text stay text."""
    kinds = {"item_count": "int", "order_total": "text", "order_ref": "code"}
    data = cli_input.render_data(
        ["item_count=-12", "order_total=٣ EUR", "order_ref=007", "tracking=12345678901234567890123"], kinds
    )
    assert data == {
        "item_count": -12,
        "order_total": "٣ EUR",
        "order_ref": "007",
        "tracking": "12345678901234567890123",
    }


@pytest.mark.parametrize("text", ["٣", "²", "５", "3.0", "+3", " 3", "3 ", "3_000", "", "-", "3\n", "1" * 17, "0x1f"])
def test_whole_numbers_are_ascii_digits_only(text: str) -> None:
    """Anything but ASCII digits (and a leading '-') is refused, and the refusal does not repeat the text."""
    with pytest.raises(CliInputError) as refused:
        cli_input.whole_number(text, "render_data.item_count")
    # The same words whatever was typed: nothing of the text can be in them.
    assert str(refused.value) == (
        "render_data.item_count: must be a whole number in ASCII digits 0-9 (a leading '-' for a negative), at most 16 digits"
    )


def test_a_negative_is_refused_where_the_minimum_is_not_negative() -> None:
    """A version number takes no '-': the rule says so without the leading-minus hint."""
    with pytest.raises(CliInputError) as refused:
        cli_input.whole_number("-1", "VERSION", minimum=1)
    assert str(refused.value) == "VERSION: must be a whole number in ASCII digits 0-9, at most 16 digits"
    assert cli_input.whole_number("12", "VERSION", minimum=1) == 12


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (["bad"], "error: --data: each item must be NAME=VALUE, e.g. --data order_ref=A-1\n"),
        ([f"{PHONE}=1"], "error: --data: NAME must be a lower-case identifier (a-z, 0-9, _), starting with a letter\n"),
        (["amount=1", "amount=2"], "error: --data amount: given twice\n"),
    ],
)
def test_malformed_data_items_are_named_without_echo(
    capsys: Any, attempts: list[str], items: list[str], expected: str
) -> None:
    """A --data item that is not NAME=VALUE, a name that is not an identifier, or a name given twice."""
    argv = [arg for item in items for arg in ("--data", item)]
    code, _, err = cli(capsys, *RECEIPT, *argv)
    assert (code, err) == (2, expected)
    assert "bad" not in err and PHONE not in err
    assert attempts == []


def test_a_missing_file_is_a_file_problem_not_a_connection_problem(
    capsys: Any, attempts: list[str], tmp_path: Path
) -> None:
    """`send --file absent.json` says the file is missing, exit 2, and connects to nothing."""
    code, _, err = cli(capsys, "send", "--file", str(tmp_path / "absent.json"))
    assert (code, err) == (2, "error: --file: no such file\n")
    assert attempts == []


@pytest.mark.parametrize(
    ("content", "rule"),
    [
        ('{"business_key": "order_receipt:pay_1", "recipient": "+15551230001" "x": 1}',
         "not valid JSON: Expecting ',' delimiter at line 1 column 69"),
        ('["+15551230001"]', "must hold a JSON object ({...})"),
        ('{"recipient": "+15551230001", "recipient": "+15551230001"}',
         "not valid JSON: the key 'recipient' appears twice in one object"),
        ('{"render_data": {"amount": NaN}, "recipient": "+15551230001"}', "not valid JSON: NaN is not a JSON number"),
        ('{"n": ' + "9" * 5000 + ', "recipient": "+15551230001"}', "not valid JSON: a number is too long"),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON: nested too deeply"),
        ('{"recipient": "+15551230001"', "not valid JSON: Expecting ',' delimiter at line 1 column 29"),
    ],
)  # fmt: skip
def test_invalid_json_in_a_file_is_one_line_with_line_and_column(
    capsys: Any, attempts: list[str], tmp_path: Path, content: str, rule: str
) -> None:
    """Invalid JSON is named by its position and what was expected, never quoted, and never a traceback."""
    path = tmp_path / "intent.json"
    path.write_text(content, encoding="utf-8")
    code, _, err = cli(capsys, "send", "--file", str(path))
    assert (code, err) == (2, f"error: --file: {rule}\n")
    assert PHONE not in err
    assert attempts == []


def test_a_file_that_is_not_utf8_or_a_directory_is_named(capsys: Any, attempts: list[str], tmp_path: Path) -> None:
    """Bytes that are not UTF-8, and a directory given as the file, are each one line about FILE."""
    latin = tmp_path / "rules.json"
    latin.write_bytes(b'{"note": "caf\xe9"}')
    assert cli(capsys, "policy", "publish", str(latin), "--owner", "ops")[:3:2] == (
        2,
        "error: FILE: must be UTF-8 text\n",
    )
    assert cli(capsys, "send", "--file", str(tmp_path))[:3:2] == (2, "error: --file: is a directory, not a file\n")
    assert attempts == []


def test_a_request_file_with_a_bad_recipient_is_refused_before_connecting(
    capsys: Any, attempts: list[str], tmp_path: Path
) -> None:
    """A whole request from --file is validated and rendered before any connection: the field, not the value."""
    path = tmp_path / "intent.json"
    request = {"business_key": "order_receipt:pay_9", "recipient": "555-0100", "template_id": "order_receipt",
               "template_version": 1, "render_data": {"order_ref": "o", "amount": "1.00", "currency": "EUR", "merchant": "M"}}  # fmt: skip
    path.write_text(json.dumps(request), encoding="utf-8")
    code, out, err = cli(capsys, "send", "--file", str(path))
    assert code == 2
    assert_refused(err, out, starts="recipient: must be an E.164 number", hidden=("555-0100",))
    assert attempts == []


def test_a_notice_file_is_rendered_before_connecting(capsys: Any, attempts: list[str], tmp_path: Path) -> None:
    """A notice's data problem (found only by rendering) is reported before any intent starts or any connection."""
    path = tmp_path / "notice.json"
    notice = {"business_key": "seller_new_order:ord_77", "channels": [
        {"channel": "sms", "recipient": PHONE, "template_id": "seller_new_order", "template_version": 2,
         "render_data": {"order_ref": "A-1", "order_total": "EUR 1", "item_count": "٣"}}]}  # fmt: skip
    path.write_text(json.dumps(notice), encoding="utf-8")
    code, out, err = cli(capsys, "send", "--file", str(path))
    assert code == 2
    assert_refused(err, out, starts="render_data.item_count: ", hidden=("٣",))
    assert attempts == []


def test_file_and_request_options_are_not_mixed(capsys: Any, attempts: list[str], tmp_path: Path) -> None:
    """--file holds the whole request; adding --to to it is refused, naming the options, not their values."""
    code, _, err = cli(capsys, "send", "--file", str(tmp_path / "x.json"), "--to", PHONE, "--channel", "email")
    assert (code, err) == (2, "error: --file: holds the whole request: leave out --to, --channel\n")
    assert attempts == []


def test_a_flag_request_names_the_option_that_was_typed(capsys: Any, attempts: list[str]) -> None:
    """A bad --to is reported as --to (not `recipient`), and a missing --key as required."""
    code, out, err = cli(capsys, "send", "--key", "seller_new_order:ord_9", "--to", "555-0100",
                         "--template", "seller_new_order", "--version", "2", "--data", "item_count=1",
                         "--data", "order_ref=a", "--data", "order_total=x")  # fmt: skip
    assert code == 2
    assert_refused(err, out, starts="--to: must be an E.164 number", hidden=("555-0100",))
    code, _, err = cli(capsys, "send", "--to", PHONE, "--template", "order_receipt", "--version", "1")
    assert (code, err) == (2, "error: --key: required (or give the whole request with --file)\n")
    assert attempts == []


@pytest.mark.parametrize(
    ("argv", "starts", "hidden"),
    [
        (["send", "--version", "٣"], "python starter.py send: argument --version: must be a version number", "٣"),
        (["send", "--channel", PHONE], "python starter.py send: argument --channel: must be one of 'sms', 'email'", PHONE),
        (["send", PHONE], "python starter.py: unrecognized arguments: 1 other value(s)", PHONE),
        (["send", f"--to={PHONE}", f"--nope={PHONE}"], "python starter.py: unrecognized arguments: --nope", PHONE),
        (["send", f"--t={PHONE}"], "python starter.py send: ambiguous option: --t could match", PHONE),
        (["status", f"order:{PHONE}"], "python starter.py status: argument key: must look like 'event_type:business_id'", PHONE),
        (["cancel", "order_receipt:pay_1", "--reason", " ", "--operator", "al"], "python starter.py cancel: argument --reason: must be 1 to 500", "xx"),
        (["template", "preview", "order_receipt", "²"], "python starter.py template preview: argument VERSION: must be a version number", "²"),
        (["policy", "show", "0"], "python starter.py policy show: argument VERSION: must be a version number (1 or more)", "xx"),
        (["policy", "publish", "r.json", "--owner", "o", "--effective-from", "2026-12-02T08:00"],
         "python starter.py policy publish: argument --effective-from: must carry a time zone", "xx"),
        (["sendd"], "python starter.py: argument COMMAND: must be one of 'send'", "sendd"),
        (["consent", "grant", PHONE, "spam", "--source", "s"], "python starter.py consent grant: argument CATEGORY: must be one of", PHONE),
    ],
)  # fmt: skip
def test_usage_errors_are_one_line_without_the_value(
    capsys: Any, attempts: list[str], argv: list[str], starts: str, hidden: str
) -> None:
    """argparse's refusals are rewritten to one line (no usage block) that quotes nothing typed; exit 2."""
    code, out, err = cli(capsys, *argv)
    assert code == 2
    assert_refused(err, out, starts=starts, hidden=(hidden,))
    assert attempts == []


@pytest.mark.parametrize(
    ("argv", "expected", "hidden"),
    [
        (["consent", "grant", "555-0100", "marketing", "--source", "form"],
         f"RECIPIENT: {NUMBER_RULE}; or an e-mail address (local-part@domain)", "555-0100"),
        (["erase", "+15551230001\n", "--operator", "al", "--reason", "r"],
         f"RECIPIENT: {NUMBER_RULE}; or an e-mail address (local-part@domain)", "5551230001"),
        (["suppression", "lift", PHONE, "--channel", "email", "--operator", "al", "--reason", "r"],
         "RECIPIENT: must be an e-mail address (local-part@domain)", PHONE),
        (["suppression", "lift", "alice@example.com", "--channel", "sms", "--operator", "al", "--reason", "r"],
         f"RECIPIENT: {NUMBER_RULE}", "alice@example.com"),
    ],
)  # fmt: skip
def test_recipients_are_checked_before_the_ledger(
    capsys: Any, attempts: list[str], argv: list[str], expected: str, hidden: str
) -> None:
    """consent and suppression refuse a recipient that no intent could carry, before connecting to the ledger."""
    code, _, err = cli(capsys, *argv)
    assert (code, err) == (2, f"error: {expected}\n")
    assert hidden not in err
    assert attempts == []


def test_an_email_recipient_is_fingerprinted_as_an_intent_records_it() -> None:
    """consent for Alice@EXAMPLE.com names the same person as an intent to her: the domain is normalised."""
    assert cli_input.recipient("Alice@EXAMPLE.com", "RECIPIENT") == "Alice@example.com"
    assert cli_input.recipient(PHONE, "RECIPIENT", "sms") == PHONE


def test_policy_rules_are_checked_before_the_ledger(capsys: Any, attempts: list[str], tmp_path: Path) -> None:
    """A rule set that breaks PolicyRules is named by path and rule, exit 2, before connecting."""
    path = tmp_path / "rules.json"
    path.write_text('{"categories": {"marketing": {"urgent": "perhaps"}}}', encoding="utf-8")
    code, out, err = cli(capsys, "policy", "publish", str(path), "--owner", "ops")
    assert code == 2
    assert_refused(err, out, starts="FILE: categories.marketing.urgent: ", hidden=("perhaps",))
    assert attempts == []


@pytest.mark.parametrize(
    ("env", "argv", "expected"),
    [
        ({"HERALD_TEMPORAL_ADDRESS": "no port here"}, ["status", "order_receipt:pay_1"],
         "HERALD_TEMPORAL_ADDRESS: must be host:port with a port from 1 to 65535, e.g. 127.0.0.1:7233"),
        ({"HERALD_TEMPORAL_TLS": "true", "HERALD_TEMPORAL_TLS_CA": "/nonexistent/ca.pem"}, ["status", "order_receipt:pay_1"],
         "HERALD_TEMPORAL_TLS_CA: no such file"),
        ({"DATABASE_URL": "host=db password=hunter2 nonsense"}, ["report"],
         "DATABASE_URL: must be a PostgreSQL connection string, e.g. postgresql://user:password@host:5432/dbname"),
        ({"DATABASE_URL": "host=db password=hunter2 nonsense"}, ["status", "order_receipt:pay_1", "--channel", "sms"],
         "DATABASE_URL: must be a PostgreSQL connection string, e.g. postgresql://user:password@host:5432/dbname"),
        ({}, ["policy", "list"], "DATABASE_URL: required (the send policy lives in the ledger's database)"),
    ],
)  # fmt: skip
def test_settings_are_checked_before_any_connection(
    capsys: Any,
    attempts: list[str],
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    argv: list[str],
    expected: str,
) -> None:
    """An unusable setting is named (never its value), exit 2, before Temporal or the database is tried:
    `status --channel` checks DATABASE_URL before it connects to Temporal."""
    use_env(monkeypatch, env)
    code, _, err = cli(capsys, *argv)
    assert (code, err) == (2, f"error: {expected}\n")
    assert "hunter2" not in err
    assert attempts == []


def test_an_unreachable_database_is_one_line_exit_1(capsys: Any, attempts: list[str]) -> None:
    """A ledger command with the database down: one line with libpq's reason, exit 1, no pool retrying."""
    code, _, err = cli(capsys, "policy", "list")
    assert code == 1
    assert err == (
        'error: cannot reach the database at DATABASE_URL: connection failed: connection to server at "127.0.0.1", '
        "port 1 failed: Connection refused\n"
    )
    assert attempts == ["database"]


@pytest.mark.parametrize(
    ("argv", "reached"),
    [
        ([*NEW_ORDER, "--data", "item_count=3"], "temporal"),
        (["consent", "grant", PHONE, "marketing", "--source", "signup form"], "database"),
        (["suppression", "lift", PHONE, "--channel", "sms", "--operator", "alice", "--reason", "resubscribed"],
         "database"),
        (["suppression", "list", PHONE], "database"),
    ],
)  # fmt: skip
def test_the_fingerprint_keys_of_the_stacks_env_file_are_used(
    capsys: Any, attempts: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], reached: str
) -> None:
    """With its keys only in the env file HERALD_ENV_FILE names (a stack's `stack.env`) and none in the
    environment, a command that fingerprints a recipient gets past the fingerprint to the service it
    needs (here away: exit 1); without the file, the same command is refused naming the keys' variable."""
    key = "c2Vzc2lvbi1rZXktb2YtdGhpcnR5LXR3by1ieXRlcyE="  # 32 bytes
    unreachable = {name: value for name, value in UNREACHABLE.items() if not name.startswith("HERALD_FINGERPRINT")}
    (tmp_path / "stack.env").write_text(f"HERALD_FINGERPRINT_KEYS=stack:{key}\n" + "".join(
        f"{name}={value}\n" for name, value in unreachable.items()
    ))  # fmt: skip
    for name in [name for name in os.environ if name.startswith("HERALD_") or name == "DATABASE_URL"]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(starter, "read_settings", READ_SETTINGS)
    refused, _, err = cli(capsys, *argv)
    assert (refused, attempts) == (2, []) and err.startswith("error: HERALD_FINGERPRINT_KEYS: required"), err
    monkeypatch.setenv("HERALD_ENV_FILE", str(tmp_path / "stack.env"))
    code, _, err = cli(capsys, *argv)
    assert (code, attempts) == (1, [reached]), err
    assert err.startswith("error: cannot reach "), err


def test_a_bug_is_one_line_naming_where_not_what(
    capsys: Any, attempts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected exception is exit 1 with its type and place, without its message (it may hold data)."""

    async def broken(args: argparse.Namespace, runtime: object) -> int:
        raise ValueError(f"invalid literal for int() with base 10: {PHONE!r}")

    monkeypatch.setattr(cli_parser, "cmd_report", broken)
    code, _, err = cli(capsys, "report")
    assert code == 1
    assert err.startswith("error: internal error (ValueError at test_starter_cli.py:") and err.count("\n") == 1
    assert PHONE not in err


def test_without_a_temporal_call_there_is_no_runtime_to_close() -> None:
    """A command that never connected leaves nothing to shut down (no Temporal runtime is made up front)."""
    runtime = ProcessRuntime(lambda: load_settings({}), own_temporal_runtime=True)
    assert runtime.close() is True


def _leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _leaves(sub, (*path, name))
    return found


def test_help_has_examples_for_every_command_and_a_description_of_every_option() -> None:
    """Every parser's --help ends with examples of its own command, and every argument has help text."""
    parsers = _leaves(cli_parser.build_parser())
    assert (
        len(parsers) == 20
    )  # the program, 10 commands and 9 actions under artifact, policy, consent, suppression, template
    for path, parser in parsers:
        assert isinstance(parser.formatter_class, type) and issubclass(
            parser.formatter_class, argparse.RawDescriptionHelpFormatter
        )
        assert parser.epilog and parser.epilog.startswith("examples:\n"), path
        if path:
            assert f"python starter.py {' '.join(path)}" in parser.epilog, path
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert action.help, (path, action.dest)
    top = cli_parser.build_parser().format_help()
    for command in cli_parser.EXAMPLES:
        assert f"python starter.py {command}" in top


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("argument --channel: invalid choice: '+15551230001' (choose from 'sms', 'email')",
         "argument --channel: must be one of 'sms', 'email'"),
        ("argument --version: invalid int value: '+15551230001'", "argument --version: must be a valid int"),
        ("argument --wait: ignored explicit argument '+15551230001'", "argument --wait: takes no value"),
        ("ambiguous option: --t=+1 555 0100 could match --to, --template", "ambiguous option: --t could match --to, --template"),
        ("unrecognized arguments: --nope=+15551230001 +15551230001 John Doe",
         "unrecognized arguments: --nope, 3 other value(s)"),
        ("the following arguments are required: --reason, --operator", "the following arguments are required: --reason, --operator"),
    ],
)  # fmt: skip
def test_argparse_messages_lose_the_values_they_quote(message: str, expected: str) -> None:
    """Each argparse message that quotes what was typed keeps its option names and drops the value."""
    assert cli_input._without_values(message) == expected
