"""A Twilio incoming message (a person's reply to our texts): whose it is, what it asks, our answer.

Twilio posts every text a handset sends to our number to the number's (or its Messaging Service's)
"A message comes in" webhook, signed like a status callback. What Herald takes from it is a
request (``herald.reply_keywords``: STOP, START, HELP or none), recorded by keyed fingerprint and
classification (``herald.ledger.recipient_requests``); the person's words and number go no
further than this module: not to the ledger, not to a log, not to an answer.

Refusals after the signature is checked, in this order (the route's table is in ``app``):

- ``foreign_reason`` (403): signed by Twilio, but not a reply to Herald's sender. When the receipt
  server knows the account (HERALD_TWILIO_ACCOUNT_SID) and the sender (HERALD_TWILIO_FROM or
  HERALD_TWILIO_MESSAGING_SERVICE_SID), a post for another account, number or service is refused:
  a STOP sent to the support line is not a request about Herald's texts, and Twilio itself blocks
  only the pair it was sent to. Left unset, every signed reply is taken as ours, which errs
  towards suppressing (a START to another number then lifts too: Twilio still blocks our sender,
  and its 21610 on the next send suppresses again).
- ``unusable_reason`` (400): ours, but without what a request needs (a MessageSid to record it
  once, a From that is a phone number by the rule every door reads numbers by, herald.recipients).
  Twilio does not retry a 4xx; its debugger shows the rule.

Twilio does not retry an incoming-message webhook that answered 5xx unless told to (a connection
override or a fallback URL, see the README); a STOP lost that way still reaches the ledger later,
as Twilio's own block answers our next send with 21610.
"""

from __future__ import annotations

import re
from datetime import datetime
from xml.sax.saxutils import escape

from herald import recipients
from herald.fingerprints import Keyring
from herald.ledger.recipient_requests import RecipientRequest
from herald.receipts.twilio_form import MAX_SID_CHARS
from herald.reply_keywords import Request
from herald.settings import TwilioSettings

# A reply's body is up to 1,600 characters; at 4 UTF-8 bytes each, percent-encoded, that is
# 19,200 bytes, and with the other fields (about 25, geography included) and up to ten media URLs
# 32 KiB holds any real incoming message. The status callback's 16 KiB would refuse a long reply.
MAX_TWILIO_INBOUND_BYTES = 32 * 1024

_SID = re.compile(r"[!-~]{1,%d}" % MAX_SID_CHARS)  # printable ASCII, no space: as the inbox's sids

EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'
# What Herald answers, with HERALD_TWILIO_INBOUND_REPLIES on, when Twilio's keyword handling does not.
REPLY_TEXTS: dict[Request, str] = {
    "opt_out": "You are unsubscribed and will receive no more texts from us. Reply START to resubscribe.",
    "opt_in": "You are resubscribed. Reply STOP to unsubscribe, HELP for help.",
    "help": "Automated notifications. Reply STOP to unsubscribe, START to resubscribe.",
}
NO_KEYWORD = "reply without a keyword"


def foreign_reason(fields: dict[str, str], twilio: TwilioSettings | None) -> str | None:
    """Why this signed post is not a reply to Herald's sender, naming the field; None when it is
    (or when the receipt server was not told whose replies are ours)."""
    if twilio is None:
        return None
    if twilio.account_sid and fields.get("AccountSid") != twilio.account_sid:
        return "AccountSid: not this deployment's account (HERALD_TWILIO_ACCOUNT_SID); not a request to Herald"
    if twilio.messaging_service_sid is not None:
        if fields.get("MessagingServiceSid") != twilio.messaging_service_sid:
            return (
                "MessagingServiceSid: not Herald's Messaging Service (HERALD_TWILIO_MESSAGING_SERVICE_SID); "
                "a reply to another sender is not a request to Herald"
            )
    elif twilio.from_number is not None and fields.get("To") != twilio.from_number:
        return "To: not Herald's sender (HERALD_TWILIO_FROM); a reply to another number is not a request to Herald"
    return None


def unusable_reason(fields: dict[str, str]) -> str | None:
    """Which rule a reply of ours breaks, naming the field (never its value); None when it breaks none."""
    if not _SID.fullmatch(fields.get("MessageSid", "")):
        return f"MessageSid: required, 1 to {MAX_SID_CHARS} printable ASCII characters (one request per message)"
    try:
        # The doors' own reading: the STOP's fingerprint is the one the person's intents carry.
        recipients.sms_number(fields.get("From", ""))
    except recipients.RecipientRefused:
        return f"From: required, {recipients.NUMBER_RULE_TEXT}, as Herald's SMS recipients are"
    return None


def recipient_request(
    fields: dict[str, str], kind: Request, keyword: str | None, at: datetime, keyring: Keyring
) -> RecipientRequest:
    """The ledger's row for a reply that broke no rule: the sender's fingerprint under `keyring`'s
    active key (of the canonical number, as every door reads it) and the classification."""
    return RecipientRequest(
        fingerprint=keyring.recipient(fields["From"]),
        channel="sms",
        request=kind,
        source="inbound_keyword",
        detail=f"keyword {keyword}" if keyword else NO_KEYWORD,
        source_ref=fields["MessageSid"],
        requested_at=at,
    )


def twiml_answer(kind: Request, *, replies: bool) -> str:
    """Our TwiML for the reply: empty (Twilio answers keywords itself), or, with ``replies``, a short
    message for STOP, START and HELP."""
    text = REPLY_TEXTS.get(kind) if replies else None
    if text is None:
        return EMPTY_TWIML
    return f'<?xml version="1.0" encoding="UTF-8"?><Response><Message>{escape(text)}</Message></Response>'
