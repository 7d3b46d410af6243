"""What a provider can do (declared per adapter), which decides how an unresolved attempt is
resolved: looked up by id or by reference, proven absent, or waited for (``herald.core.machine``)."""

from __future__ import annotations

from herald.core.outcomes import Frozen


class Capabilities(Frozen):
    """What a provider can do, so the workflow picks a strategy without knowing the provider."""

    status_lookup: bool  # a message can be fetched by its provider id
    lookup_by_reference: bool  # a message can be found without its provider id, in every state it can be in
    # A submit can bound the provider's own queue time (Twilio: ValidityPeriod): once the bound has
    # passed, a message still unsent is dropped, so one that was never listed can no longer appear.
    # Without it, "not found" by reference never proves absence.
    bounded_queue: bool
    cancel_accepted: bool  # an accepted (not just scheduled) message can be canceled
    # The provider reports on messages at all (an SMTP relay without an event webhook does not):
    # without reports or lookups, acceptance is the last thing Herald can ever know.
    delivery_reports: bool = True
    # The provider refuses a message id it has already accepted when it comes again within this many
    # seconds (Infobip's idempotent sending, an account setting): an attempt whose submit answer was
    # lost is then resubmitted under the same id, and the provider's dedupe keeps it one message
    # (``herald.core.resubmission``). None: no such promise; an unknown submit is only looked up.
    resubmit_dedupe_seconds: int | None = None
