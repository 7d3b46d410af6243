"""A handset's reply, as Twilio handles it: its keyword blocks or unblocks the pair, then the number's
incoming-message webhook gets a signed form post.

Twilio's default keyword handling ("SMS STOP filtering", as its support articles describe it), which
the emulator plays:

- Only the whole message, trimmed and in any case, is a keyword: "STOP" blocks, "STOP PLEASE" does
  not. Opt-out: STOP, STOPALL, UNSUBSCRIBE, CANCEL, END, QUIT, REVOKE, OPTOUT; opt-in: START, YES,
  UNSTOP; help: HELP, INFO.
- An opt-out blocks the pair (handset, the number it was sent to); when that number is in a
  Messaging Service, the whole service too. Every later create from that number or service to the
  handset is answered 400 with error 21610 until the handset sends an opt-in keyword.
- The block is made whether or not the number has a webhook, and before the webhook is called;
  Twilio then answers the keyword itself (its confirmation text, returned here as
  ``twilio_reply``) and passes the message on to the webhook.
- The webhook is posted once: Twilio retries an incoming-message webhook only on a failed
  connection (and only as a URL's connection overrides say), never on a 5xx answer.

With ``advanced_opt_out`` the post carries ``OptOutType`` (STOP, START or HELP), as a Messaging
Service with Advanced Opt-Out adds to keyword messages.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlencode

import httpx
from pydantic import BaseModel, ConfigDict, Field

from emulator.background import BackgroundPoster
from emulator.messages import API_VERSION, count_segments
from herald.providers.twilio_signature import compute_signature

Kind = Literal["opt_out", "opt_in", "help"]

OPT_OUT_KEYWORDS = frozenset({"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "REVOKE", "OPTOUT"})
OPT_IN_KEYWORDS = frozenset({"START", "YES", "UNSTOP"})
HELP_KEYWORDS = frozenset({"HELP", "INFO"})
# What Advanced Opt-Out reports as OptOutType for each kind of keyword.
OPT_OUT_TYPES: dict[Kind, str] = {"opt_out": "STOP", "opt_in": "START", "help": "HELP"}
# Twilio's default answers to the keywords (what the handset receives from Twilio, not from us).
TWILIO_REPLIES: dict[Kind, str] = {
    "opt_out": (
        "You have successfully been unsubscribed. You will not receive any more messages from this number. "
        "Reply START to resubscribe."
    ),
    "opt_in": (
        "You have successfully been re-subscribed to messages from this number. Reply HELP for help. "
        "Reply STOP to unsubscribe. Msg&Data Rates May Apply."
    ),
    "help": "Reply STOP to unsubscribe. Msg&Data Rates May Apply.",
}
# What the admin answer quotes of the webhook's answer: TwiML is short; anything longer is cut.
_ANSWER_CHARS = 2000

_E164 = r"\+[1-9][0-9]{1,14}"
_SENDER = re.compile(rf"{_E164}|[0-9]{{3,8}}")  # a number or a short code (a sender ID takes no replies)


class InboundRequest(BaseModel):
    """``POST /_emulator/inbound``: a handset texts our number."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    from_: str = Field(alias="from", pattern=rf"^{_E164}$")
    body: str = Field(max_length=1600)
    # The number texted; default: the emulator's sender (the one a Messaging Service picks).
    to: str | None = Field(default=None, pattern=rf"^({_SENDER.pattern})$")
    messaging_service_sid: str | None = Field(default=None, pattern=r"^MG[0-9a-fA-F]{32}$")
    # The number's "A message comes in" webhook; default: the emulator's --inbound-url. None: no post.
    url: str | None = Field(default=None, max_length=4000)
    # The same message posted again (a replay of one MessageSid); default: a new message.
    message_sid: str | None = Field(default=None, pattern=r"^(SM|MM)[0-9a-fA-F]{32}$")
    advanced_opt_out: bool = False


def keyword_of(body: str) -> tuple[Kind | None, str | None]:
    """(what the keyword does, the keyword), or (None, None) for a message that is none."""
    word = body.strip().upper()
    for kind, words in (("opt_out", OPT_OUT_KEYWORDS), ("opt_in", OPT_IN_KEYWORDS), ("help", HELP_KEYWORDS)):
        if word in words:
            return kind, word  # type: ignore[return-value]
    return None, None


class OptOuts:
    """The blocked pairs: (handset, sender), a sender being our number or our Messaging Service."""

    def __init__(self) -> None:
        self._blocked: set[tuple[str, str]] = set()

    def apply(self, kind: Kind | None, handset: str, senders: list[str]) -> None:
        for sender in senders:
            if kind == "opt_out":
                self._blocked.add((handset, sender))
            elif kind == "opt_in":
                self._blocked.discard((handset, sender))

    def blocks(self, handset: str, senders: list[str]) -> bool:
        """Whether a message to ``handset`` from any of ``senders`` is refused (21610)."""
        return any((handset, sender) in self._blocked for sender in senders)

    def describe(self) -> list[dict[str, str]]:
        return [{"handset": handset, "sender": sender} for handset, sender in sorted(self._blocked)]

    def clear(self) -> None:
        self._blocked.clear()


def inbound_params(
    request: InboundRequest, *, sid: str, to: str, account_sid: str, opt_out_type: str | None
) -> list[tuple[str, str]]:
    """The form of Twilio's incoming-message webhook for this reply, geography included."""
    params = [
        ("ToCountry", "US"), ("ToState", "CA"), ("SmsMessageSid", sid), ("NumMedia", "0"), ("ToCity", ""),
        ("FromZip", "94105"), ("SmsSid", sid), ("FromState", "CA"), ("SmsStatus", "received"),
        ("FromCity", "SAN FRANCISCO"), ("Body", request.body), ("FromCountry", "US"), ("To", to), ("ToZip", ""),
        ("NumSegments", str(count_segments(request.body))), ("MessageSid", sid), ("AccountSid", account_sid),
        ("From", request.from_), ("ApiVersion", API_VERSION),
    ]  # fmt: skip
    if request.messaging_service_sid:
        params.append(("MessagingServiceSid", request.messaging_service_sid))
    if opt_out_type:
        params.append(("OptOutType", opt_out_type))
    return params


@dataclass(frozen=True)
class Delivered:
    """What the webhook answered (or why there was no answer)."""

    url: str
    http_status: int | None
    answer: str | None
    error: str | None

    def as_json(self) -> dict[str, object]:
        return {"url": self.url, "http_status": self.http_status, "answer": self.answer, "error": self.error}


async def post_inbound(poster: BackgroundPoster, url: str, params: list[tuple[str, str]], auth_token: str) -> Delivered:
    """One signed form post to the webhook, as Twilio makes it: no retry on a 5xx answer."""
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Twilio-Signature": compute_signature(auth_token, url, params),
        "I-Twilio-Idempotency-Token": str(uuid.uuid4()),
        "User-Agent": "TwilioProxy/1.1 (herald-emulator)",
    }
    try:
        response = await poster.post(url, content=urlencode(params).encode("utf-8"), headers=headers)
    except (httpx.HTTPError, httpx.InvalidURL, OSError) as error:
        return Delivered(url, None, None, f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)
    return Delivered(url, response.status_code, response.text[:_ANSWER_CHARS], None)
