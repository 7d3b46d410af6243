"""The names in herald.temporal.workflow_api are exactly the ones NotificationWorkflow declares."""

from __future__ import annotations

import ast
from pathlib import Path

from temporalio import workflow

from herald.temporal.workflow_api import (
    ATTEMPTS_KEY,
    QUERY_STATUS,
    SEARCH_ATTRIBUTES,
    SIGNAL_DELIVERY_REPORTS,
    SIGNAL_KEY_CONFLICT,
    STATE_KEY,
    UPDATE_CANCEL,
    WORKFLOW_TYPE,
    initial_search_attributes,
)
from workflows.notification import NotificationWorkflow

HERALD = Path(__file__).parents[2] / "herald"


def test_the_workflow_declares_the_api_names() -> None:
    """Type, signals, query and update names match, so the client and receipt path reach the workflow."""
    definition = workflow._Definition.must_from_class(NotificationWorkflow)
    assert definition.name == WORKFLOW_TYPE
    assert set(definition.signals) == {SIGNAL_DELIVERY_REPORTS, SIGNAL_KEY_CONFLICT}
    assert set(definition.queries) == {QUERY_STATUS}
    assert set(definition.updates) == {UPDATE_CANCEL}


def test_initial_search_attributes_are_registered_and_leave_the_state_unsaid() -> None:
    """A start request sets registered search attributes only, with their registered types, and no
    state or attempt count: the workflow shows those when it has something to say (a straight
    delivery never does, and saves its billed upsert)."""
    pairs = initial_search_attributes("order_receipt.v1", "sms").search_attributes
    assert {pair.key.name for pair in pairs} == set(SEARCH_ATTRIBUTES) - {STATE_KEY.name, ATTEMPTS_KEY.name}
    assert all(SEARCH_ATTRIBUTES[pair.key.name] == "Keyword" for pair in pairs)


def test_herald_never_imports_workflow_code() -> None:
    """Dependencies point one way, from the workflow to the domain: no module under herald/ imports workflows."""
    offenders = []
    for path in HERALD.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(name == "workflows" or name.startswith("workflows.") for name in names):
                offenders.append(str(path.relative_to(HERALD.parent)))
    assert offenders == []
