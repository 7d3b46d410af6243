"""How far the suite's property searches look: a quarter of each search in `make test`, all of it in
`make test-deep` (HERALD_TEST_DEPTH=deep).

Each search names the examples it was written for, `examples(400)`; the suite runs a quarter of them
(derandomized searches: the first quarter of the same sequence), which is where their failures were
found, and `make test-deep` runs them all before a release or after a change to the rules they search.
"""

from __future__ import annotations

import os

DEEP = os.environ.get("HERALD_TEST_DEPTH") == "deep"


def examples(written_for: int) -> int:
    """The examples a search runs: all it was written for when deep, else a quarter (at least 10)."""
    return written_for if DEEP else min(written_for, max(10, written_for // 4))
