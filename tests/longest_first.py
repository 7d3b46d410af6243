"""`make test`'s order (``-p tests.longest_first``): the files that take longest start first.

`make test` hands each worker whole files in collection order (--dist loadfile --no-loadscope-reorder),
so these start first and the many short files fill in around them at the end; xdist's own order, by
test count, started the longest file near the end, beside the CPU-heavy files. Only an order: a file
missing here, or a stale figure, costs time, never a test.
"""

from __future__ import annotations

from collections import Counter

import pytest

# Seconds summed over each file's tests in one `make test` (3 workers, 2026-12-06, load 3 to 9: the
# machine shared), longest first, but a file that mostly computes (starting processes, parsing) after
# one that mostly waits on the test policy's clocks, so three workers seldom compute at once: the
# load-sensitive tests (the route-isolation deadline, the rate-limit and fault-matrix counts) feel it.
LONGEST_FIRST = (
    "tests/faults/test_fault_matrix.py",  # 149
    "tests/integration/test_outages.py",  # 72
    "tests/integration/test_infobip_dedupe.py",  # 38 alone, waiting on its emulator's 15 s steps (issue 31)
    "tests/integration/test_route_failover.py",  # 45 alone, 30 of them the probe's wait (issue 31)
    "tests/integration/test_demo_failover.py",  # 44 alone, the same wait (issue 31)
    "tests/integration/test_absence_proof.py",  # 49 alone at load 10, its scenarios played at once (was 107)
    "tests/browser/test_console_in_chromium.py",  # 34 alone, computing (Chromium, the Web UI; issue 33)
    "tests/integration/test_readme_commands.py",  # 48 alone at load 10, four at a time (was 102), computing
    "tests/integration/test_message_claims.py",  # 41 alone at load 10, the twins at once (was 49)
    "tests/integration/test_agent_tool.py",  # 57, computing
    "tests/integration/test_route_fairness.py",  # 47
    "tests/integration/test_email_channel.py",  # 46
    "tests/integration/test_erasure_reach.py",  # 42
    "tests/faults/test_outbox.py",  # 46
    "tests/receipts/test_route_isolation.py",  # 47, computing
    "tests/integration/test_starter_cli.py",  # 40 alone at load 10, four processes at a time (was 57), computing
    "tests/faults/test_policy_with_real_workers.py",  # 32
    "tests/integration/test_retention.py",  # 45, computing
    "tests/integration/test_lifecycle.py",  # 30 alone at load 10, its scenarios at once (was 59)
    "tests/integration/test_operator_views.py",  # 33
    "tests/faults/test_report_burst.py",  # 35
    "tests/integration/test_submit_rate_limit.py",  # 30
    "tests/faults/test_deploy_replay.py",  # 34, computing
    "tests/integration/test_route_priority.py",  # 22
    "tests/workflow/test_sms_paths.py",  # 38, computing
    "tests/integration/test_bounded_waits.py",  # 23
    "tests/receipts/test_unsubscribe_route.py",  # 33, computing
    "tests/integration/test_entry_points_search.py",  # 23
    "tests/console/test_routes_and_lists.py",  # about 12 of the console tier's 21 alone (issue 33)
    "tests/emulator/test_esp_emulator.py",  # 28
    "tests/emulator/test_emulator.py",  # 25
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest files first, then the rest by test count (xdist's own order); a file's tests keep theirs."""
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    counts = Counter(_file_of(item) for item in items)
    items.sort(key=lambda item: (rank.get(_file_of(item), len(rank)), -counts[_file_of(item)]))


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]
