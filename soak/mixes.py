"""The soak's fault mixes: which fault each intent meets at the emulators, and the clocks it runs under."""

from __future__ import annotations

from datetime import timedelta

from herald.core.delivery_policy import DeliveryPolicy

# (fault, parameters, weight): half the intents meet no fault at all.
FAULT_MIX: list[tuple[str | None, dict, int]] = [
    (None, {}, 50),
    ("accept_then_hang", {"hang_seconds": 4}, 5),
    ("accept_then_hang", {"hang_seconds": 4, "callbacks": False}, 2),
    # Answer lost while the message waits in the sender's queue (no date_sent): found queued, sent once.
    ("accept_then_hang", {"hang_seconds": 4, "queue_seconds": 20}, 3),
    # Longer than the ValidityPeriod: dropped unsent (30036), then sent again.
    ("accept_then_hang", {"hang_seconds": 4, "queue_seconds": 45}, 1),
    ("error_500", {}, 5),
    ("error_503", {}, 3),
    ("rate_limit", {"retry_after": 1}, 6),
    ("duplicate_callbacks", {"copies": 3}, 6),
    ("callback_before_response", {}, 5),
    ("out_of_order_callbacks", {}, 5),
    ("no_callback", {}, 5),
    ("delayed_callback", {"delay_seconds": 3}, 2),
    # The one fault that leaves no evidence of an outcome: `unknown` is right for these alone.
    ("silent", {}, 2),
]
# The run behind issue 8: a quarter of the submits answered too late while their messages sit 90 s
# in the sender's queue. The proof window (60 + 120 s) outlasts the queue, the horizon the window.
QUEUE_BACKLOG_MIX: list[tuple[str | None, dict, int]] = [
    (None, {}, 75),
    ("accept_then_hang", {"hang_seconds": 4, "queue_seconds": 90}, 25),
]
# Clocks short enough for a soak to end; shapes like production's.
SOAK_POLICY = DeliveryPolicy(
    backoff_initial=timedelta(seconds=1),
    backoff_max=timedelta(seconds=10),
    retry_after_cap=timedelta(seconds=10),
    submit_timeout=timedelta(seconds=8),
    lookup_first_delay=timedelta(seconds=1),
    lookup_max=timedelta(seconds=5),
    submit_in_flight_bound=timedelta(seconds=10),
    provider_queue_validity=timedelta(seconds=30),
    poll_initial=timedelta(seconds=3),
    poll_max=timedelta(seconds=15),
    resolution_horizon=timedelta(seconds=90),
)
# The run behind issue 29: intents in pairs, the same text to the same number moments apart (two
# receipts of the same amount at the same shop), against a provider that loses many answers. A
# lookup by number and body fits both twins' messages; each must end on its own or stay in doubt.
TWINS_MIX: list[tuple[str | None, dict, int]] = [
    (None, {}, 40),
    ("accept_then_hang", {"hang_seconds": 4}, 15),
    ("accept_then_hang", {"hang_seconds": 4, "callbacks": False}, 15),
    ("error_500", {}, 15),
    ("hang_without_accept", {"hang_seconds": 4}, 15),
]
# The failover mix (issue 31): Twilio, the primary, refuses connections in windows (soak/failover.py)
# and each intent meets a fault drawn from this list at Twilio and, independently, one from
# INFOBIP_FAILOVER_MIX at Infobip, where it lands only if it fails over. The answers lost after
# acceptance (hangs, 5xx after the message was taken) must be resolved at their own provider; 429s
# and refusals before acceptance prove nothing was sent and may fail over.
TWILIO_FAILOVER_MIX: list[tuple[str | None, dict, int]] = [
    (None, {}, 50),
    ("accept_then_hang", {"hang_seconds": 4}, 8),
    ("accept_then_hang", {"hang_seconds": 4, "callbacks": False}, 3),
    ("accept_then_error", {"status": 500}, 5),
    ("accept_then_error", {"status": 503}, 3),
    ("error_500", {}, 4),
    ("hang_without_accept", {"hang_seconds": 4}, 3),
    ("rate_limit", {"retry_after": 1}, 6),
    ("duplicate_callbacks", {"copies": 3}, 3),
    ("callback_before_response", {}, 3),
    ("out_of_order_callbacks", {}, 3),
    ("no_callback", {}, 3),
    ("delayed_callback", {"delay_seconds": 3}, 2),
    ("silent", {}, 1),
]
# Infobip's fault vocabulary (emulator/infobip/faults.py), the same shape: ambiguous answers,
# refusals before acceptance, 429 without Retry-After (Infobip documents none), report faults.
INFOBIP_FAILOVER_MIX: list[tuple[str | None, dict, int]] = [
    (None, {}, 50),
    ("accept_then_hang", {"hang_seconds": 4}, 8),
    ("accept_then_hang", {"hang_seconds": 4, "reports": False}, 3),
    ("accept_then_error", {"status": 500}, 4),
    ("accept_then_error", {"status": 504}, 2),
    ("error_500", {}, 3),
    ("error_503", {}, 2),
    ("hang_without_accept", {"hang_seconds": 4}, 3),
    ("rate_limit", {}, 4),
    ("report_before_response", {}, 3),
    ("duplicate_reports", {"copies": 3}, 3),
    ("out_of_order_reports", {}, 3),
    ("no_report", {}, 3),
    ("delayed_report", {"delay_seconds": 3}, 2),
    ("silent", {}, 1),
]
MIXES = {
    "default": (FAULT_MIX, SOAK_POLICY),
    "twins": (TWINS_MIX, SOAK_POLICY),
    "failover": (TWILIO_FAILOVER_MIX, SOAK_POLICY),
    "queue_backlog": (
        QUEUE_BACKLOG_MIX,
        SOAK_POLICY.model_copy(
            update={
                # Production's in-flight bound, as in the run the issue describes; 60 + 120 s outlasts the queue.
                "submit_in_flight_bound": timedelta(seconds=60),
                "provider_queue_validity": timedelta(seconds=120),
                "resolution_horizon": timedelta(seconds=300),
            }
        ),
    ),
}
