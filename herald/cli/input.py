"""Command-line text into checked values, for `starter.py`: nothing here connects to anything.

Every refusal is a ``CliInputError`` (a ``HeraldError``): one line naming the option or argument and
the rule it broke, never the value, because what an operator types is often a phone number, an
e-mail address or render data. The same holds for argparse's own errors, which
``OneLineArgumentParser`` rewrites: argparse quotes the offending value and prints its usage on a
second line.

Whole numbers are ASCII digits only. Python's ``int()`` also reads any Unicode decimal digit
(``int("٣") == 3``) and ``str.isdigit()`` is true for superscripts (``"²"``) that ``int()`` then
refuses, so neither is used on typed text.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, NoReturn

from herald.core import recipients
from herald.intake.errors import HeraldError
from herald.intake.requests import BUSINESS_KEY_PATTERN
from herald.intake.template_registry import LATEST

# A request or a rule set is a few KiB; the bound keeps `--file /dev/zero` from reading forever.
MAX_JSON_BYTES = 1024 * 1024
# A template version is at most a few thousand characters (MAX_EMAIL_BODY_CHARS is 100,000).
MAX_TEMPLATE_BYTES = 256 * 1024
# Render data and the ledger keep whole numbers within ±2^53 (herald.intake.requests): 16 digits hold them,
# and refusing longer text up front keeps int() far from its 4,300-digit limit.
_MAX_INT_DIGITS = 16
_WHOLE_NUMBER = re.compile(rf"-?[0-9]{{1,{_MAX_INT_DIGITS}}}")
_DIGITS = re.compile(rf"[0-9]{{1,{_MAX_INT_DIGITS}}}")
_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_BUSINESS_KEY = re.compile(BUSINESS_KEY_PATTERN)
# Parts of a JSON path or an option that may be shown: identifiers and small indexes, nothing a
# caller could have filled with personal data.
_SHOWABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}|[0-9]{1,4}")
_OPTION = re.compile(r"--?[A-Za-z][A-Za-z0-9_-]{0,40}")

# How a request field is spelled on the command line, so a refusal names what the operator typed.
# Render data keeps the request's own names (render_data.amount), as the template's contract does.
OPTION_FOR_FIELD = {
    "business_key": "--key",
    "channel": "--channel",
    "recipient": "--to",
    "template_id": "--template",
    "template_version": "--version",
    "tenant": "--tenant",
    "priority": "--priority",
}


class CliInputError(HeraldError):
    """One option or argument broke one rule; nothing was connected to or changed."""

    def __init__(self, field: str, rule: str) -> None:
        self.field = field
        self.rule = rule
        super().__init__(f"{field}: {rule}")


def whole_number(text: str, field: str, *, minimum: int | None = None) -> int:
    """`text` as an int: ASCII digits, a leading '-' only where negatives are allowed."""
    negatives = minimum is None or minimum < 0
    if not _WHOLE_NUMBER.fullmatch(text) or (text.startswith("-") and not negatives):
        sign = " (a leading '-' for a negative)" if negatives else ""
        raise CliInputError(
            field, f"must be a whole number in ASCII digits 0-9{sign}, at most {_MAX_INT_DIGITS} digits"
        )
    value = int(text)
    if minimum is not None and value < minimum:
        raise CliInputError(field, f"must be at least {minimum}")
    return value


def render_data(items: Iterable[str], kinds: Mapping[str, str]) -> dict[str, str | int]:
    """``--data NAME=VALUE`` items as render data; `kinds` maps a template's fields to their kinds.

    A field the template declares ``int`` becomes an int (ASCII digits only); every other value is
    kept exactly as typed, so a text field's "007" or a 20-digit tracking number stays text.
    Unknown names and the template's own rules are left to the intent's validation.
    """
    data: dict[str, str | int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise CliInputError("--data", "each item must be NAME=VALUE, e.g. --data order_ref=A-1")
        if not _NAME.fullmatch(name):
            raise CliInputError("--data", "NAME must be a lower-case identifier (a-z, 0-9, _), starting with a letter")
        if name in data:
            raise CliInputError(f"--data {name}", "given twice")
        if kinds.get(name) == "int":
            data[name] = whole_number(value, f"render_data.{name}")
        else:
            data[name] = value
    return data


def name_options(problems: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Request fields (``recipient``) as the options that set them (``--to``)."""
    named = []
    for field, rule in problems:
        head, _, rest = field.partition(".")
        option = OPTION_FOR_FIELD.get(head)
        named.append((f"{option} {rest}".strip() if option else field, rule))
    return named


def priority_key(text: str) -> int | str:
    """``--priority N`` for the request: ASCII digits become the int the model checks against its
    range; anything else stays text, which the model's strict int refuses with the same rule."""
    return int(text) if _DIGITS.fullmatch(text) else text


def version_or_latest(text: str) -> int | str:
    """argparse type: a template version number (1 or more) or 'latest'."""
    if text == LATEST:
        return text
    return _as_argument(
        lambda: whole_number(text, "version", minimum=1), "must be a version number (1 or more) or 'latest'"
    )


def version_number(text: str) -> int:
    """argparse type: a version number, 1 or more."""
    return _as_argument(lambda: whole_number(text, "version", minimum=1), "must be a version number (1 or more)")


def business_key(text: str) -> str:
    """argparse type: an intent's business key, `event_type:business_id`."""
    if not _BUSINESS_KEY.fullmatch(text):
        raise argparse.ArgumentTypeError(
            "must look like 'event_type:business_id' (lower-case event type; letters, digits, '_', '.', ':', '-')"
        )
    return text


def bounded_text(max_chars: int) -> Callable[[str], str]:
    """argparse type: non-blank text of at most `max_chars` characters (the ledger's column rules)."""

    def parse(text: str) -> str:
        if not text.strip() or len(text) > max_chars:
            raise argparse.ArgumentTypeError(f"must be 1 to {max_chars} characters, not blank")
        return text

    return parse


def whole_seconds(maximum: int) -> Callable[[str], int]:
    """argparse type: a whole number of seconds from 0 to `maximum`, in ASCII digits."""

    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit() and len(text) <= 6) or int(text) > maximum:
            raise argparse.ArgumentTypeError(f"must be whole seconds from 0 to {maximum}")
        return int(text)

    return parse


def http_url(text: str) -> str:
    """argparse type: an http:// or https:// base URL with a host."""
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.split("/")[0] or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError("must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8234")
    return text.rstrip("/")


def time_with_zone(text: str) -> datetime:
    """argparse type: an ISO 8601 time that carries its zone."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "must be an ISO 8601 time with a zone, e.g. 2026-12-02T08:00:00+00:00"
        ) from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError("must carry a time zone, e.g. 2026-12-02T08:00:00+00:00")
    return value


def recipient(text: str, field: str, channel: str | None = None) -> str:
    """A recipient as intents record it: E.164 for SMS, a normalised e-mail address for e-mail.

    Read by the one function every door uses (``herald.core.recipients.recipient``: its docstring has the
    rule), so consent, suppression and erasure typed here name the person an intent names. Without
    a channel, an '@' means an e-mail address and anything else a phone number.
    """
    try:
        return recipients.recipient(text, channel)
    except recipients.RecipientRefused as refused:
        # Without a channel the operator may have meant either kind: both are named.
        either = "; or an e-mail address (local-part@domain)" if channel is None and "@" not in text else ""
        raise CliInputError(field, refused.rule + either) from None


def read_bytes(path: str, field: str, *, max_bytes: int) -> bytes:
    """A file's bytes, refused in one line when missing, unreadable or over `max_bytes`."""
    try:
        with open(path, "rb") as handle:
            # One byte past the limit is enough to refuse: a huge file is never read whole.
            raw = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise CliInputError(field, "no such file") from None
    except IsADirectoryError:
        raise CliInputError(field, "is a directory, not a file") from None
    except OSError as error:  # permission denied and the like; strerror never includes the path
        raise CliInputError(field, f"cannot be read ({error.strerror or type(error).__name__})") from None
    except ValueError:  # a path with a NUL byte in it
        raise CliInputError(field, "is not a usable file path") from None
    if len(raw) > max_bytes:
        raise CliInputError(field, f"must be at most {max_bytes // 1024} KiB")
    return raw


def read_text(path: str, field: str, *, max_bytes: int) -> str:
    try:
        return read_bytes(path, field, max_bytes=max_bytes).decode("utf-8")
    except UnicodeDecodeError:
        raise CliInputError(field, "must be UTF-8 text") from None


def read_json_object(path: str, field: str) -> dict[str, Any]:
    """A file holding one JSON object; a syntax error is named by line and column, not quoted."""
    return parse_json_object(read_text(path, field, max_bytes=MAX_JSON_BYTES), field)


def parse_json_object(text: str, field: str) -> dict[str, Any]:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key, value in pairs:
            if key in found:
                shown = f" {key!r}" if _SHOWABLE.fullmatch(key) else ""
                raise CliInputError(field, f"not valid JSON: the key{shown} appears twice in one object")
            found[key] = value
        return found

    def no_constants(name: str) -> NoReturn:
        raise CliInputError(field, f"not valid JSON: {name} is not a JSON number")

    try:
        value = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constants)
    except json.JSONDecodeError as error:  # msg says what was expected, never what was found
        raise CliInputError(field, f"not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    except RecursionError:
        raise CliInputError(field, "not valid JSON: nested too deeply") from None
    except ValueError:  # an integer literal past Python's 4,300-digit conversion limit
        raise CliInputError(field, "not valid JSON: a number is too long") from None
    if not isinstance(value, dict):
        raise CliInputError(field, "must hold a JSON object ({...})")
    return value


def _as_argument(parse: Callable[[], Any], rule: str) -> Any:
    """argparse reports an ArgumentTypeError's text as given; any other error would quote the value."""
    try:
        return parse()
    except CliInputError:
        raise argparse.ArgumentTypeError(rule) from None


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, with each usage error as one line (exit 2) that quotes no value the caller typed.

    Subcommand parsers inherit the class (argparse builds them with the parent's type).
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {_without_values(message)} (see {self.prog} --help)\n")


def _without_values(message: str) -> str:
    """argparse's message with the caller's text taken out (the option names stay)."""
    choice = re.match(r"(argument \S+: )invalid choice: .* \(choose from (.*)\)$", message, re.DOTALL)
    if choice:
        return f"{choice.group(1)}must be one of {choice.group(2)}"
    typed = re.match(r"(argument \S+: )invalid (\S+) value: ", message)
    if typed:
        return f"{typed.group(1)}must be a valid {typed.group(2)}"
    explicit = re.match(r"(argument \S+: )ignored explicit argument ", message)
    if explicit:
        return f"{explicit.group(1)}takes no value"
    ambiguous = re.match(r"ambiguous option: ([^=]*?)(=.*)? could match (.*)$", message, re.DOTALL)
    if ambiguous:
        return f"ambiguous option: {ambiguous.group(1)} could match {ambiguous.group(3)}"
    prefix = "unrecognized arguments: "
    if message.startswith(prefix):
        # Option names are shown (without any =value); anything else is counted, not quoted.
        words = message[len(prefix) :].split()
        shown = [name for name in (word.split("=", 1)[0] for word in words) if _OPTION.fullmatch(name)]
        hidden = len(words) - len(shown)
        return prefix + ", ".join(shown + ([f"{hidden} other value(s)"] if hidden else []))
    return message.replace("\n", " ")
