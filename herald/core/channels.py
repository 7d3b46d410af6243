"""What Herald assumes about a channel's provider before the provider has said anything.

An attempt learns its provider's capabilities from the submit activity's answer. When that answer
never came (the worker died mid-submit, the activity timed out) the workflow still has to choose
how to resolve the attempt, and chooses from the channel: an SMS provider is assumed to have
Twilio's lookups (if it has none, the lookups answer "unavailable" and the attempt ends `unknown`
at the horizon: never a resend), and e-mail over SMTP has no lookup at all, only events.
"""

from __future__ import annotations

from herald.core.capabilities import Capabilities
from herald.core.message import Channel

ASSUMED_CAPABILITIES: dict[Channel, Capabilities] = {
    Channel.SMS: Capabilities(
        status_lookup=True,
        lookup_by_reference=True,
        bounded_queue=True,
        cancel_accepted=False,
    ),
    Channel.EMAIL: Capabilities(
        status_lookup=False,
        lookup_by_reference=False,
        bounded_queue=False,
        cancel_accepted=False,
    ),
}


def assumed_capabilities(channel: Channel) -> Capabilities:
    return ASSUMED_CAPABILITIES[channel]
