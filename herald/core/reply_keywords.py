"""What a text reply asks for, by Twilio's default keywords: pure, for the receipt server's edge.

Twilio's own handling (and the carriers' expectation): the whole message, trimmed and in any case,
must be the keyword. "STOP" and " Stop " opt out; "stop please" and "STOP." do not (free text is a
conversation, not a request). A Messaging Service with Advanced Opt-Out tells us its own
classification in the webhook's ``OptOutType`` (STOP, START or HELP, with its custom keywords
included); when present it is taken over our matching, since it is what Twilio acted on.
"""

from __future__ import annotations

from typing import Literal

Request = Literal["opt_out", "opt_in", "help", "other"]

OPT_OUT_KEYWORDS = frozenset({"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "REVOKE", "OPTOUT"})
OPT_IN_KEYWORDS = frozenset({"START", "YES", "UNSTOP"})
HELP_KEYWORDS = frozenset({"HELP", "INFO"})
_OPT_OUT_TYPES: dict[str, Request] = {"STOP": "opt_out", "START": "opt_in", "HELP": "help"}


def classify_reply(body: str, opt_out_type: str | None = None) -> tuple[Request, str | None]:
    """(what the reply asks, the keyword that said so); ("other", None) for anything else."""
    if opt_out_type:
        kind = _OPT_OUT_TYPES.get(opt_out_type.strip().upper())
        if kind is not None:
            return kind, opt_out_type.strip().upper()
    word = body.strip()
    if not word.isascii():  # upper() maps "ſtop" and "ﬆop" to STOP: the keywords are ASCII words
        return "other", None
    word = word.upper()
    if word in OPT_OUT_KEYWORDS:
        return "opt_out", word
    if word in OPT_IN_KEYWORDS:
        return "opt_in", word
    if word in HELP_KEYWORDS:
        return "help", word
    return "other", None
