"""Settings read from the environment: a bad value names its variable and the rule."""

from __future__ import annotations

import pytest

from herald.settings import InvalidSetting, load_settings


def test_receipt_hold_defaults_to_two_seconds_and_reads_the_variable() -> None:
    """HERALD_RECEIPT_HOLD_SECONDS defaults to 2 s and accepts 0 (hold nothing) and fractions."""
    assert load_settings({}).receipts.hold_seconds == 2.0
    assert load_settings({"HERALD_RECEIPT_HOLD_SECONDS": "0"}).receipts.hold_seconds == 0.0
    assert load_settings({"HERALD_RECEIPT_HOLD_SECONDS": "0.25"}).receipts.hold_seconds == 0.25


@pytest.mark.parametrize("value", ["abc", "-1", "61", "nan"])
def test_a_bad_receipt_hold_is_refused_naming_the_variable(value: str) -> None:
    """A hold that is not a number of seconds from 0 to 60 is refused with the variable's name and the rule."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings({"HERALD_RECEIPT_HOLD_SECONDS": value})
    assert str(refused.value) == "HERALD_RECEIPT_HOLD_SECONDS: must be a number of seconds from 0 to 60"


def test_submit_rate_limit_is_unlimited_unless_set() -> None:
    """HERALD_SUBMIT_RATE_LIMIT unset, empty or 0 means no limit; a positive number is the submits per second."""
    assert load_settings({}).twilio.submit_rate_limit is None
    assert load_settings({"HERALD_SUBMIT_RATE_LIMIT": ""}).twilio.submit_rate_limit is None
    assert load_settings({"HERALD_SUBMIT_RATE_LIMIT": "0"}).twilio.submit_rate_limit is None
    assert load_settings({"HERALD_SUBMIT_RATE_LIMIT": "9.7"}).twilio.submit_rate_limit == 9.7


@pytest.mark.parametrize("value", ["ten", "-1", "inf", "nan"])
def test_a_bad_submit_rate_limit_is_refused_naming_the_variable(value: str) -> None:
    """A submit rate that is not a finite number of messages per second, at least 0, is refused naming the variable."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings({"HERALD_SUBMIT_RATE_LIMIT": value})
    assert str(refused.value).startswith("HERALD_SUBMIT_RATE_LIMIT: must be a number of messages per second")


@pytest.mark.parametrize(
    "name,value,rule",
    [
        ("HERALD_TWILIO_CONNECT_TIMEOUT", "abc", "must be a number of seconds from 0 to 600"),
        ("HERALD_TWILIO_READ_TIMEOUT", "0", "must be a number of seconds from 0 to 600"),
        ("HERALD_TWILIO_MAX_IN_FLIGHT", "many", "must be a whole number from 1 to 1024"),
        ("HERALD_RECEIPT_PORT", "80x", "must be a port number from 1 to 65535"),
        ("HERALD_SMTP_PORT", "99999", "must be a port number from 1 to 65535"),
        ("HERALD_TEMPORAL_TLS", "ture", "must be one of 1, true, yes, on, 0, false, no, off"),
        ("HERALD_SMTP_SECURITY", "ssl", "must be one of starttls, tls, none"),
    ],
)
def test_a_bad_value_fails_in_one_line_naming_the_variable_and_the_rule(name: str, value: str, rule: str) -> None:
    """No raw traceback, no silent default: the variable and its rule, never a guess."""
    with pytest.raises(InvalidSetting) as refused:
        load_settings({name: value})
    assert str(refused.value) == f"{name}: {rule}"


def test_tls_accepts_the_usual_spellings() -> None:
    assert load_settings({"HERALD_TEMPORAL_TLS": "TRUE"}).temporal.tls is True
    assert load_settings({"HERALD_TEMPORAL_TLS": "off"}).temporal.tls is False
    assert load_settings({}).temporal.tls is False
