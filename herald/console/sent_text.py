"""The text a notice sent, opened by an operator who says why: the form, its refusals, the answer page.

The text is the ledger's copy (intents.body and subject, in the clear so that erasure can overwrite
them; Temporal holds only sealed tokens, and only until retention). The console's own login
(herald_reader) cannot read it; a second login, of herald_text_opener (HERALD_CONSOLE_OPENER_DATABASE_URL,
migration 024), may only call ``open_sent_text``, which writes the opening (operator, reason, time,
outcome) and returns the text in the same statement. So every text shown has its row in
``text_openings`` first, an erased person's text is not there to open (the page says: erased), and
the story lists every opening. Why not the recipients' data keys and the key-encryption key: the
ledger's copy is not sealed under them, so such a gate would guard nothing the function does not.

The form is a POST, never a link: a prefetcher, a link checker or a browser's preview never opens
a text. Its reason is required and bounded, and refused when it looks like a person (an address, a
number): the record outlives erasure. Every refusal names the field and the rule. The text
is escaped like everything else (``el``) and never reaches a log line.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl

from herald.console.markup import Markup, el, fragment
from herald.console.pages import moment, notice_href
from herald.console.params import ParameterRefused, one_line, only
from herald.core.outcomes import Frozen
from herald.ledger.text_openings import OPERATOR_MAX, REASON_MAX, OpeningOutcome, RecordedOpening, SentText

ACTION = "/notice/text"
# A workflow id: a business key (at most the search box's 320 characters) and its channel.
WORKFLOW_MAX = 400
# Both fields at their longest, every character four UTF-8 bytes percent-encoded (x3), and the names.
MAX_FORM_BYTES = 16_384
# What looks like a person in a reason: an e-mail address, or eight digits or more (a phone number,
# spaced or not). The reason is kept for good, and erasure does not reach it: cite a ticket instead.
_PERSON_LIKE = re.compile(r"@|\d(?:[\s().\-/]?\d){7,}")
NOT_ENABLED = (
    "Opening sent text is not enabled on this console (it needs HERALD_CONSOLE_OPENER_DATABASE_URL, "
    "a login of herald_text_opener: migration 024)."
)


class OpeningForm(Frozen):
    """What the form asked: whose text, and why."""

    workflow_id: str
    reason: str


def read_opening_form(body: bytes) -> OpeningForm:
    """The form's fields, or ParameterRefused naming the first one that breaks its rule."""
    try:
        fields = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=4)
    except (UnicodeDecodeError, ValueError):
        raise ParameterRefused("request body", "must be a form (application/x-www-form-urlencoded, UTF-8)") from None
    given = only(fields, ("workflow", "reason"))
    if "workflow" not in given:
        raise ParameterRefused("workflow", "required: the workflow whose text is opened")
    workflow_id = one_line("workflow", given["workflow"], WORKFLOW_MAX)
    if "reason" not in given:
        raise ParameterRefused(
            "reason", f"required: why this text is opened (a ticket, a dispute), 1 to {REASON_MAX} characters"
        )
    reason = one_line("reason", given["reason"], REASON_MAX)
    if _PERSON_LIKE.search(reason):
        raise ParameterRefused(
            "reason", "must not hold an e-mail address or a phone number (it is kept after an erasure): cite a ticket"
        )
    return OpeningForm(workflow_id=workflow_id, reason=reason)


def operator_recordable(operator: str) -> str:
    """The operator as the ledger records them (the access gate admits at most as many characters)."""
    return operator[:OPERATOR_MAX]


def text_section(workflow_id: str, openings: list[RecordedOpening], enabled: bool) -> Markup:
    """A channel's "text as sent": the form that opens it (or why there is none here), and its openings."""
    if enabled:
        opener: Markup = el(
            "form",
            el("input", type="hidden", name="workflow", value=workflow_id),
            el(
                "label",
                "reason ",
                el(
                    "input",
                    type="text",
                    name="reason",
                    required=True,
                    maxlength=REASON_MAX,
                    placeholder="why: a ticket, a dispute",
                    autocomplete="off",
                ),
            ),  # fmt: skip
            el("button", "Open the text as sent", type="submit"),
            el("span", " (recorded in the ledger: who, when, why)", class_="muted"),
            method="post",
            action=ACTION,
            class_="open-text",
        )
    else:
        opener = el("p", NOT_ENABLED, class_="muted not-enabled")
    return fragment(el("h3", "text as sent"), opener, openings_table(openings))


def openings_table(openings: list[RecordedOpening]) -> Markup:
    if not openings:
        return el("p", "never opened", class_="muted")
    head = el("tr", *(el("th", h) for h in ("opened", "by", "reason", "outcome")))
    rows = [
        el(
            "tr",
            el("td", moment(o.opened_at), class_="mono"),
            el("td", o.operator),
            el("td", o.reason),
            el("td", o.outcome.value),
            class_="opening",
        )  # fmt: skip
        for o in openings
    ]
    return el("table", el("thead", head), el("tbody", *rows), class_="openings")


def opened_body(sent: SentText, form: OpeningForm, operator: str) -> list[object]:
    """The answer page's content: the text (escaped), or that the person was erased, and who opened it when."""
    business_key = form.workflow_id.rpartition("/")[0] or form.workflow_id
    stamp = el("p", f"opened by {operator} at {moment(sent.opened_at)}, reason: {form.reason}",
               class_="opened-stamp")  # fmt: skip
    back = el("p", el("a", "← the notice's story", href=notice_href(business_key)))
    head = el("h1", "text as sent ", el("code", form.workflow_id))
    if sent.outcome is OpeningOutcome.ERASED:
        said = el("p", el("strong", "erased"), ": this person was erased; their text is no longer in the ledger "
                  "and cannot be opened. This attempt is recorded.", class_="erased")  # fmt: skip
        return [head, said, stamp, back]
    parts: list[object] = [head, stamp]
    if sent.channel == "email":
        subject = el("dd", sent.subject or "-", class_="sent-subject")
        parts.append(el("dl", el("dt", "subject"), subject, class_="facts"))
    parts += [el("pre", sent.body or "", class_="sent-body"), back]
    return parts
