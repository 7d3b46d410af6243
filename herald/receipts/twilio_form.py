"""A Twilio status callback's form: read within a bound, parsed, then checked against what the ledger can hold.

Two kinds of refusal, answered differently by the route:

- Before the signature is checked, anything may be an attacker's: a body over
  ``MAX_TWILIO_BODY_BYTES`` is refused unread (413) and a body that is not a form is refused (400).
  Nothing of it is stored.
- After the signature is checked, the words are Twilio's. A signed report that breaks a storage
  rule (``unstorable_reason``) will break it again on every redelivery, so it is recorded as a
  rejection with its rule and answered 2xx: a 5xx would make Twilio redeliver it for as long as it
  retries, and the log would never say why.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from herald.receipts.rejections import cut_short

# Twilio's status callbacks are a few hundred bytes (about 20 fields of short values; the longest
# real one seen carries ~900 bytes). 16 KiB is a generous multiple and no form past it is parsed.
MAX_TWILIO_BODY_BYTES = 16 * 1024
# A real callback has about 20 fields; this bounds the work of parsing a signed-but-odd one.
MAX_FIELDS = 100
FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"

# What the inbox row's columns can hold, as rules a reason can name.
MAX_SID_CHARS = 64  # Twilio's sids are 34 characters (SM + 32 hex); the unique index holds this easily
MAX_STATUS_CHARS = 32
MAX_ERROR_CODE_DIGITS = 9  # fits PostgreSQL's integer; Twilio's codes have 5 digits
MAX_ATTEMPT_REF_CHARS = 128


class NotAForm(ValueError):
    """The body is not an urlencoded form this endpoint could read; the message names the rule."""


def parse_form(body: bytes, content_type: str | None) -> list[tuple[str, str]]:
    """The form's (name, value) pairs, in order and with repeats, exactly as Starlette would read them."""
    if (content_type or "").split(";")[0].strip().lower() != FORM_CONTENT_TYPE:
        raise NotAForm(f"Content-Type: must be {FORM_CONTENT_TYPE}, as Twilio sends its callbacks")
    try:
        # latin-1 maps every byte: percent-escapes are then decoded as UTF-8, as Starlette does.
        return parse_qsl(body.decode("latin-1"), keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except ValueError:
        raise NotAForm(f"request body: more than {MAX_FIELDS} fields, not a status callback") from None


def _printable_ascii(value: str) -> bool:
    return value.isascii() and value.isprintable() and " " not in value


def unstorable_reason(fields: dict[str, str], attempt_ref: str | None) -> str | None:
    """Which storage rule this signed report breaks, naming the field and the rule; None when it breaks none."""
    for name, value in fields.items():
        if "\x00" in name or "\x00" in value:
            return f"{_shown_name(name)}: holds a NUL character, which the ledger cannot store"
    sid = fields.get("MessageSid", "")
    if not sid:
        return "MessageSid: required in a status callback"
    if len(sid) > MAX_SID_CHARS or not _printable_ascii(sid):
        return f"MessageSid: must be 1 to {MAX_SID_CHARS} printable ASCII characters"
    status = fields.get("MessageStatus", "")
    if not status:
        return "MessageStatus: required in a status callback"
    if len(status) > MAX_STATUS_CHARS or not _printable_ascii(status):
        return f"MessageStatus: must be 1 to {MAX_STATUS_CHARS} printable ASCII characters"
    code = fields.get("ErrorCode", "")
    if code and not (code.isascii() and code.isdigit() and len(code) <= MAX_ERROR_CODE_DIGITS):
        return f"ErrorCode: must be a whole number of at most {MAX_ERROR_CODE_DIGITS} digits"
    if attempt_ref is not None and not is_storable_attempt_ref(attempt_ref):
        return f"attempt (query parameter): must be 1 to {MAX_ATTEMPT_REF_CHARS} printable ASCII characters"
    return None


def is_storable_attempt_ref(attempt_ref: str) -> bool:
    return 0 < len(attempt_ref) <= MAX_ATTEMPT_REF_CHARS and _printable_ascii(attempt_ref)


def _shown_name(name: str) -> str:
    """A field name fit for a reason: cut short and spelled out, since an attacker-sized name is no name."""
    return cut_short(name, 64) or "(unnamed field)"
