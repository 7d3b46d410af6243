"""Which rules a run follows: the evidence rules of issue 8, or those it was started under.

Runs that record EVIDENCE_RULES_PATCH prove absence only past the provider's queue bound, let
evidence about any attempt settle the intent, and look once more at the horizon before `unknown`.
The marker is asked for only where the earlier rules would decide otherwise, so a run whose
decisions agree under both, the normal path among them, records none and pays nothing; runs
recorded before it replay with the rules they were started under (tests/replay holds some).
"""

from __future__ import annotations

from temporalio import workflow

EVIDENCE_RULES_PATCH = "absence-proof-evidence-across-attempts-final-lookup"


def evidence_rules_apply() -> bool:
    """Whether this run follows the evidence rules; call it only where the two sets of rules differ."""
    return workflow.patched(EVIDENCE_RULES_PATCH)
