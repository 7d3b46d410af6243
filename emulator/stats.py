"""Counters the admin API reports at ``GET /_emulator/stats``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class EmulatorStats:
    accepted: int = 0
    # Create requests answered with an error, by Twilio error code (429s and 5xx included).
    rejected_by_code: Counter[int] = field(default_factory=Counter)
    rate_limited: int = 0  # 429 answers, from the real limiter or the rate_limit fault
    hangs: int = 0  # create answers held back by a hang fault
    auth_failures: int = 0
    callback_attempts: int = 0
    callbacks_succeeded: int = 0  # attempts the receiver answered 2xx
    callbacks_failed: int = 0  # attempts with a non-2xx answer or no answer
    callbacks_abandoned: int = 0  # callbacks given up after the last attempt
    inbound_received: int = 0  # replies handsets sent (POST /_emulator/inbound)
    inbound_posts_succeeded: int = 0  # replies the webhook answered 2xx
    inbound_posts_failed: int = 0  # replies the webhook refused or did not answer (never retried)
    # ListMessage pages served, by the `To` they were filtered on ("" for none).
    list_pages_by_to: Counter[str] = field(default_factory=Counter)

    def reset(self) -> None:
        """Zero every counter in place (the lifecycle holds a reference to this object)."""
        fresh = EmulatorStats()
        for item in fields(self):
            setattr(self, item.name, getattr(fresh, item.name))

    def reject(self, code: int) -> None:
        self.rejected_by_code[code] += 1

    def as_json(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "rejected_by_code": {str(code): count for code, count in sorted(self.rejected_by_code.items())},
            "rejected": sum(self.rejected_by_code.values()),
            "rate_limited": self.rate_limited,
            "hangs": self.hangs,
            "auth_failures": self.auth_failures,
            "list_pages_by_to": dict(self.list_pages_by_to),
            "inbound": {
                "received": self.inbound_received,
                "posts_succeeded": self.inbound_posts_succeeded,
                "posts_failed": self.inbound_posts_failed,
            },
            "callbacks": {
                "attempts": self.callback_attempts,
                "succeeded": self.callbacks_succeeded,
                "failed": self.callbacks_failed,
                "abandoned": self.callbacks_abandoned,
            },
        }
