"""Errors a caller can cause, each naming the field and the rule it broke.

Messages never contain the offending value: a phone number or render datum in
an error would leak PII into logs and tracebacks of every service that calls us.
"""

from __future__ import annotations


class HeraldError(Exception):
    """Base for errors Herald reports to its callers as one clear line."""


class InvalidIntent(HeraldError):
    """The intent request broke a validation rule; nothing was started or sent."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{field}: {rule}" for field, rule in problems))


class IntentConflict(HeraldError):
    """The business key already names an intent with a different payload."""

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        super().__init__(
            f"business key {workflow_id!r} is already used by an intent with a different payload; "
            "an idempotency key must name one message, so use a new key for new content"
        )


class IntentNotFound(HeraldError):
    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        super().__init__(f"no intent with key {workflow_id!r}")
