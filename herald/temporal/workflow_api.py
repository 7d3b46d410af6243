"""NotificationWorkflow's public face: the names services and the receipt path call it by.

The workflow (``workflows/notification.py``) declares its type, signals, query and update under
these names; the client and the receipt server use them with the typed contracts of
``herald.core.contracts``, so nothing in ``herald/`` imports workflow code (dependencies point one way,
from the workflow to the domain). One module holds the names, so they cannot drift, and
``tests/unit/test_workflow_api.py`` holds the workflow's own definition against them.

    name                      kind     payload            answer
    NotificationWorkflow      type     NotificationInput  IntentStatus
    delivery_reports          signal   ReportBatch        -
    key_conflict              signal   KeyConflict        -
    status                    query    -                  IntentStatus
    cancel                    update   CancelRequest      CancelAnswer
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from herald.core.lifecycle import TERMINAL_STATES, IntentState

WORKFLOW_TYPE = "NotificationWorkflow"
SIGNAL_DELIVERY_REPORTS = "delivery_reports"
SIGNAL_KEY_CONFLICT = "key_conflict"
QUERY_STATUS = "status"
UPDATE_CANCEL = "cancel"

# Custom search attributes the Web UI filters on: no PII, ever (Temporal stores them in plain text).
STATE_KEY = SearchAttributeKey.for_keyword("HeraldState")
CHANNEL_KEY = SearchAttributeKey.for_keyword("HeraldChannel")
TEMPLATE_KEY = SearchAttributeKey.for_keyword("HeraldTemplate")
ATTEMPTS_KEY = SearchAttributeKey.for_int("HeraldAttempts")
# The same, as `temporal operator search-attribute create` takes them: registered by the local
# launcher and, in production, once per namespace.
SEARCH_ATTRIBUTES = {
    STATE_KEY.name: "Keyword",
    CHANNEL_KEY.name: "Keyword",
    TEMPLATE_KEY.name: "Keyword",
    ATTEMPTS_KEY.name: "Int",
}


def initial_search_attributes(template_label: str, channel: str) -> TypedSearchAttributes:
    """The search attributes a new intent starts with; set by the client in the start request.

    No state and no attempt count: the workflow shows them (one billed upsert each time) before a
    wait long enough to checkpoint and at every close but one, a straight delivery, which is most
    notices. So in the Web UI a running intent with no HeraldState has not yet waited long, and a
    closed one with none was delivered (``delivered_quietly_query``); the ledger has every outcome.
    """
    return TypedSearchAttributes([SearchAttributePair(CHANNEL_KEY, channel), SearchAttributePair(TEMPLATE_KEY, template_label)])


def delivered_quietly_query() -> str:
    """The Web UI query for the intents delivered straight (closed without ever showing a state);
    with ``HeraldState = "delivered"`` (the ones that showed one on the way), every delivered intent."""
    return f'ExecutionStatus = "Completed" AND {STATE_KEY.name} IS NULL'


def not_delivered_query() -> str:
    """The Web UI / `temporal workflow list` query for every intent that ended without delivery:
    every terminal state but delivered (unknown, undelivered, permanent_failure, expired, ...)."""
    states = sorted(state.value for state in TERMINAL_STATES if state is not IntentState.DELIVERED)
    return f"{STATE_KEY.name} IN (" + ", ".join(f'"{state}"' for state in states) + ")"
