"""The intent machine's resubmission path, as tables of events and the commands they produce
(``tests/unit/machine_tables.py``): a lost answer at a provider that refuses a repeated id within
a grace is sent again under the same attempt, and never once the intent is cancelled."""

from __future__ import annotations

from herald.core.outcomes import Accepted, ProviderStatus, Unknown
from herald.providers.twilio import TwilioAdapter
from tests.unit.machine_tables import (
    ENDED,
    ORDER_READ,
    SHORT,
    STARTED,
    WRITTEN,
    Case,
    called,
    cancel,
    play,
)

DEDUPING = TwilioAdapter.capabilities.model_copy(update={"resubmit_dedupe_seconds": 300})
LOST = called(Unknown(reason="ReadTimeout after the request may have been sent"), DEDUPING, provider="infobip")
HTTP_500 = called(Unknown(reason="HTTP 500: acceptance unknown"), DEDUPING, provider="infobip")
QUEUED = called(Accepted(provider_id="att_1", status=ProviderStatus.QUEUED), DEDUPING, provider="infobip")
FIRST = [(0, STARTED, ["read order"]), (0, ORDER_READ, ["submit attempt 1: intent, attempt 1, t1 submitting"])]


def test_a_lost_answer_is_resubmitted_under_the_same_attempt_until_accepted() -> None:
    """Lost, resubmitted 2 s later (its claim row in the submit's batch), lost again, resubmitted 4 s
    later and accepted: one attempt, no lookup by reference."""
    play(Case("resubmitted", [
        *FIRST,
        (1, LOST, ["check history"]),
        (0, SHORT, ["write o1 unknown"]),
        (0, WRITTEN, ["publish submitting/1", "wait 2s"]),
        (2, ENDED, ["submit attempt 1: o2 resubmitted"]),
        (0, HTTP_500, ["check history"]),
        (0, SHORT, ["write o3 unknown (not applied)"]),
        (0, WRITTEN, ["wait 4s"]),
        (4, ENDED, ["submit attempt 1: o4 resubmitted"]),
        (0, QUEUED, ["check history"]),
        (0, SHORT, ["wait 30s"]),  # accepted: polled by id, written lazily as on the normal path
    ]))  # fmt: skip


def test_a_cancel_while_a_resubmission_waits_sends_nothing_more() -> None:
    """Cancelled while the next resubmission waits: no resubmission; the attempt the provider may
    have is followed by lookups at its own provider, as after any cancel."""
    play(Case("cancelled", [
        *FIRST,
        (1, LOST, ["check history"]),
        (0, SHORT, ["write o1 unknown"]),
        (0, WRITTEN, ["publish submitting/1", "wait 2s"]),
        (1, cancel(), ["reply cancelled", "(woken)"]),
        (0, ENDED, ["check history"]),
        (0, SHORT, ["write t2 cancelled"]),
        (0, WRITTEN, ["publish cancelled/1", "wait 5s, a cancel does not wake it"]),
        (5, ENDED, ["look attempt 1 by reference"]),
    ]))  # fmt: skip
