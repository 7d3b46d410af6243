"""One canonical recipient: how every door reads a phone number or an e-mail address.

A recipient enters Herald at many doors: ``IntentRequest`` (so ``HeraldClient`` and the agent
tool), a notice's channel entry (so the outbox's ``enqueue`` and its relay), ``starter.py`` (send,
consent, suppression, erase), the inbound SMS route's ``From``. Consent, suppression, cooldowns and
erasure find a person by the keyed fingerprint of one form (``herald.privacy.fingerprints``). A door that
let a second spelling of a number through made a second person: ``"+15552600018\\n"`` passed a
``re.match`` whose pattern ended in ``$`` (Python's ``$`` also matches before a final newline), its
fingerprint was not the number's, a STOP from the number did not stop it and erasing the number
did not erase it. So every door calls ``sms_number`` or ``email_address`` here, and the
fingerprint is taken over what they return.

Every refusal is a ``RecipientRefused`` carrying the rule only: the door names its field, and no
message ever holds the value (a recipient is personal data).
"""

from __future__ import annotations

import unicodedata

import phonenumbers
from email_validator import EmailNotValidError, validate_email
from phonenumbers import ValidationResult

# E.164 allows at most 15 digits; Herald has always asked for at least 8 (no country's dialable
# numbers are shorter once the country code is counted in).
MIN_DIGITS = 8
MAX_DIGITS = 15
# Far above any spelling of 15 digits with separators ("+1 (555) 260-0018" is 17); bounds the work.
MAX_NUMBER_CHARS = 64
# Between the plus and the last digit, these are dropped: how people write numbers.
SEPARATORS = frozenset(" -.()")
_PLUS_SIGNS = frozenset("+\uff0b")  # '+' and the full-width '＋'

NUMBER_RULE_TEXT = (
    "an E.164 number: '+' then 8 to 15 digits that form a possible number for their country code "
    "(spaces, '-', '.', '(' and ')' between the digits are dropped); nothing before the '+' or after "
    "the last digit, no line breaks, letters, extensions or leading 00"
)
NUMBER_RULE = f"must be {NUMBER_RULE_TEXT}"
EMAIL_RULE = "must be an e-mail address (local-part@domain)"


class RecipientRefused(ValueError):
    """A recipient broke the rule; the rule is the message, the value is never in it."""

    def __init__(self, rule: str) -> None:
        self.rule = rule
        super().__init__(rule)


def sms_number(text: str) -> str:
    """The one canonical form of a phone number (E.164, ``+`` and ASCII digits), or a refusal.

    The rule, the same at every door:

    Normalised (so consent, suppression, fingerprints and erasure see one number):
      - the full-width plus ``＋`` (U+FF0B) becomes ``+``;
      - any Unicode decimal digit (Arabic-Indic ``٥``, full-width ``５``, Devanagari ...) becomes
        its ASCII digit;
      - spaces, ``-``, ``.``, ``(`` and ``)`` after the plus and before the last digit are dropped.

    Refused (``RecipientRefused(NUMBER_RULE)``; the door names its field):
      - anything before the plus or after the last digit: surrounding whitespace, a final line end;
      - line ends, tabs and every other character anywhere: letters (a vanity number), extensions
        (``;ext=``, ``x``, ``#``), ``tel:``, other Unicode spaces, superscript digits;
      - a number without the plus, a leading ``00`` included (which exit code is meant depends on
        the country it is dialled from, which a notice does not say);
      - fewer than 8 or more than 15 digits, or more than 64 characters in all;
      - what phonenumbers (9.0.43) does not call exactly *possible*: an unknown country code, or a
        length the country's plan does not allow (a length possible only for a local call, too).
        "Possible", not "valid": valid also asks for an assigned range, and the fictional
        ``+1 555 01xx`` and ``+44 7700 900xxx`` numbers used by tests and demos are unassigned;
      - a number phonenumbers would rewrite into other digits (it strips what it takes for a
        national prefix from some over-long numbers): the canonical form holds exactly the digits
        given.
    """
    if not text or len(text) > MAX_NUMBER_CHARS or text[0] not in _PLUS_SIGNS or not text[-1].isdecimal():
        raise RecipientRefused(NUMBER_RULE)
    digits = []
    for char in text[1:]:
        if char.isdecimal():  # Unicode category Nd: every such character has a decimal value
            digits.append(str(unicodedata.decimal(char)))
        elif char not in SEPARATORS:
            raise RecipientRefused(NUMBER_RULE)
    canonical = "+" + "".join(digits)
    if not MIN_DIGITS <= len(digits) <= MAX_DIGITS or digits[0] == "0":
        raise RecipientRefused(NUMBER_RULE)
    try:
        parsed = phonenumbers.parse(canonical, None)
    except phonenumbers.NumberParseException:
        raise RecipientRefused(NUMBER_RULE) from None
    if phonenumbers.is_possible_number_with_reason(parsed) != ValidationResult.IS_POSSIBLE:
        raise RecipientRefused(NUMBER_RULE)
    if phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164) != canonical:
        raise RecipientRefused(NUMBER_RULE)
    return canonical


def email_address(text: str) -> str:
    """An e-mail address as intents carry it and messages go to: email_validator's normalised form
    (domain lower-cased and NFC; the local part as given), or a refusal.

    Whitespace and line ends anywhere, surrounding ones included, are refused (email_validator's
    own rule), never stripped. The person behind the address, for fingerprints and erasure, is
    ``herald.privacy.fingerprints.canonical_recipient`` of this form (the local part lower-cased too).
    """
    try:
        return validate_email(text, check_deliverability=False).normalized
    except EmailNotValidError:
        raise RecipientRefused(EMAIL_RULE) from None


def recipient(text: str, channel: str | None = None) -> str:
    """A recipient for `channel` ("sms" or "email"); without one, an '@' makes it an e-mail address
    and anything else a phone number."""
    if channel == "sms" or (channel is None and "@" not in text):
        return sms_number(text)
    return email_address(text)


# Enough of a fingerprint's HMAC for an operator to tell destinations apart in a status view.
SHORT_HEX = 16


def short(fingerprint: str) -> str:
    """A fingerprint's first hex digits, without the key id: enough to tell two destinations apart,
    worthless without the key."""
    return fingerprint.rpartition(":")[2][:SHORT_HEX]
