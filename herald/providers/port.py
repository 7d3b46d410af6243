"""What every provider adapter shares, whatever its channel: declared capabilities and the cancel answer.

Capabilities decide the reconciliation path (``DESIGN.md``): with a status lookup, look the
attempt up; with a lookup by reference that sees every state and a bounded queue, "not found" can
prove absence; without either, wait for a report that carries our reference, and never resend on
a guess. Submit and lookup answers are the channel-neutral outcomes of ``herald.outcomes``.
"""

from __future__ import annotations

from herald.outcomes import Frozen


class Capabilities(Frozen):
    """What a provider can do, so the workflow picks a strategy without knowing the provider."""

    idempotent_submit: bool  # a repeated submit cannot create a second message
    reference_in_reports: bool  # delivery reports carry our attempt reference
    status_lookup: bool  # a message can be fetched by its provider id
    lookup_by_reference: bool  # a message can be found without its provider id, in every state it can be in
    # A submit can bound the provider's own queue time (Twilio: ValidityPeriod): once the bound has
    # passed, a message still unsent is dropped, so one that was never listed can no longer appear.
    # Without it, "not found" by reference never proves absence.
    bounded_queue: bool
    cancel_accepted: bool  # an accepted (not just scheduled) message can be canceled


class CancelOutcome(Frozen):
    canceled: bool
    reason: str
