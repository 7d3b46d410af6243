"""`make test`'s order (``-p tests.longest_first``): the files that take longest start first.

`make test` hands each worker whole files in collection order (--dist loadfile --no-loadscope-reorder),
so these start first and the many short files fill in around them at the end; xdist's own order, by
test count, started the longest file near the end, beside the CPU-heavy files. Only an order: a file
missing here, or a stale figure, costs time, never a test.
"""

from __future__ import annotations

from collections import Counter

import pytest

# Seconds summed over each file's tests, measured alone on 2 cores (README "Tests").
LONGEST_FIRST = (
    "tests/faults/test_report_burst.py",  # 226 s alone
    "tests/faults/test_fault_matrix.py",  # 130
    "tests/integration/test_absence_proof.py",  # 95
    "tests/integration/test_outages.py",  # 70
    "tests/integration/test_lifecycle.py",  # 65
    "tests/faults/test_outbox.py",  # 50
    "tests/integration/test_email_channel.py",  # 45
    "tests/integration/test_erasure_reach.py",  # 40
    "tests/faults/test_policy_with_real_workers.py",  # 35
    "tests/receipts/test_route_isolation.py",  # 50, computing
    "tests/integration/test_starter_cli.py",  # 49, computing (process starts)
    "tests/integration/test_submit_rate_limit.py",  # 28
    "tests/integration/test_route_fairness.py",  # 58 (two tenants' batches, equal and weighted)
    "tests/integration/test_route_queue_age.py",  # 25
    "tests/integration/test_category_validity.py",  # 21
    "tests/integration/test_demo_priority.py",  # 15
    "tests/integration/test_route_priority.py",  # 22
    "tests/integration/test_route_deadline.py",  # 15
    "tests/integration/test_entry_points_search.py",  # 27, computing
    "tests/faults/test_deploy_replay.py",  # 23, computing
    "tests/integration/test_bounded_waits.py",  # 21
    "tests/emulator/test_emulator.py",  # 21
    "tests/emulator/test_esp_emulator.py",  # 21
    "tests/unit/test_lifecycle_properties.py",  # 20, computing
    "tests/unit/test_outbox_erasure.py",  # 19, computing
    "tests/integration/test_agent_tool.py",  # 19
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest files first, then the rest by test count (xdist's own order); a file's tests keep theirs."""
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    counts = Counter(_file_of(item) for item in items)
    items.sort(key=lambda item: (rank.get(_file_of(item), len(rank)), -counts[_file_of(item)]))


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]
