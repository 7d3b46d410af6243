"""Proof by search: hypothesis throws strange input at every entry point of Herald.

Arbitrary JSON, strings from every Unicode category (surrogates and C1 controls included), deep
nesting, huge numbers and wrong types, both alone and as one field of an otherwise valid request.
The invariant at each door: the input is refused there with a named field and rule (never a
traceback, never the value echoed), or its intent reaches a terminal state within the test policy's
clocks; no process exits; no traceback reaches a caller or a log.

Doors: ``HeraldClient.send`` and ``send_notice``, ``starter.py send --file``, the outbox (``enqueue``
and the relay), the agent tool over MCP, template publish and preview. Requests and notices carry a
tenant and priorities, valid or strange: a strange one is refused naming its field (``tenant``,
``priority``, ``channels.<i>.priority``) and starts nothing, not even a notice's other channels.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from temporalio.service import RPCError, RPCStatusCode

from devstack.stack import LocalStack
from herald import outbox
from herald.client import HeraldClient
from herald.core.message import Channel
from herald.core.send_policy import TENANT_PATTERN
from herald.intake.errors import IntentConflict, InvalidIntent
from herald.intake.requests import BUSINESS_KEY_PATTERN
from herald.intake.template_registry import PublishRefused, TemplateError, publish, render_message
from herald.ledger.store import open_pool
from herald.outbox.relay import OutboxRelay
from tests.depth import examples
from tests.intents import ORDER_DATA, fresh_address, fresh_key, fresh_recipient
from tests.stack import create_outbox_database

REPO = Path(__file__).resolve().parents[2]
# Each door's budget: examples that start intents wait for them, so these are kept small.
SEARCH = settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
TERMINAL_WITHIN = 45.0

# ---- strange values ---------------------------------------------------------------------------------

any_char = st.characters(codec=None, exclude_categories=())  # every category, surrogates and controls too
strange_text = st.text(alphabet=any_char, max_size=40) | st.sampled_from(
    ["\x85", "\u2028", "\u2029", "\x00", "\ud800", "üser@example.com", "../../../etc", "${order_ref}", "١٢٣", "latest",
     "+15551230001", "", " ", "\n", "a" * 5000, "'; DROP TABLE intents;--"]
)  # fmt: skip
huge_numbers = st.sampled_from([2**53 + 1, -(2**63), 10**400, math.inf, -math.inf, math.nan, 1e308, -0.0])


def nested(depth: int) -> Any:
    value: Any = "x"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | huge_numbers | strange_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(strange_text, inner, max_size=4),
    max_leaves=12,
) | st.integers(min_value=40, max_value=150).map(nested)  # deeper still: hypothesis could not print it


def sms_request() -> dict[str, Any]:
    return {"business_key": fresh_key(), "channel": "sms", "recipient": fresh_recipient(),
            "template_id": "order_receipt", "template_version": 1, "render_data": dict(ORDER_DATA)}  # fmt: skip


def email_request() -> dict[str, Any]:
    return {"business_key": fresh_key(), "channel": "email", "recipient": fresh_address(),
            "template_id": "order_receipt_email", "template_version": 1, "render_data": dict(ORDER_DATA)}  # fmt: skip


FIELDS = ["business_key", "recipient", "template_id", "template_version", "render_data", "channel", "expires_at",
          "time_zone", "attachment", "tenant", "priority", "unexpected"]  # fmt: skip
# Tenants and priority keys a caller means, and the near misses a caller makes.
tenants = st.sampled_from(["shared", "acme", "t-1.b_2", "9lives", "a" * 48])
priorities = st.integers(min_value=1, max_value=5)
meant = st.fixed_dictionaries({}, optional={"tenant": tenants, "priority": priorities})
near_misses = st.sampled_from([0, 6, -1, 2**63, True, False, 3.0, "3", "ACME", "acme corp", "-acme", "a" * 49, "",
                               "+15551230001", None])  # fmt: skip


@st.composite
def requests(draw: st.DrawFn) -> Any:
    """A whole strange value, or a valid request with one field (or one render field) made strange."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    request = draw(st.sampled_from([sms_request, email_request]))()
    request.update(draw(meant))
    target = draw(st.sampled_from([*FIELDS, "render_data.*"]))
    value = draw(near_misses | json_values if target in ("tenant", "priority") else json_values)
    if target == "render_data.*":
        request["render_data"][draw(st.sampled_from([*ORDER_DATA, "extra"]))] = value
    elif draw(st.booleans()):
        request[target] = value
    else:
        request.pop(target, None)
    return request


def echoes_value(error: str, value: Any) -> bool:
    """Whether a refusal quotes a string of the input (personal data must never come back)."""
    texts = [value] if isinstance(value, str) else []
    if isinstance(value, dict):
        texts += [v for v in value.values() if isinstance(v, str)]
        texts += [v for r in value.values() if isinstance(r, dict) for v in r.values() if isinstance(v, str)]
    return any(len(text) >= 8 and text in error and text not in _HARMLESS for text in texts)


_HARMLESS = {"order_receipt", "order_receipt_email", "latest", "ord_84721", "Herald Shop"}


def tenant_ok(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(TENANT_PATTERN, value) is not None


def priority_ok(value: Any) -> bool:
    """A priority key as the model takes it: a strict int (not true, 3.0 or "3") from 1 to 5."""
    return type(value) is int and 1 <= value <= 5


def named_by_their_rules(request: Any) -> set[str]:
    """The fields a refusal of `request` must name: its tenant and priority when they break their rules."""
    if not isinstance(request, dict):
        return set()
    bad = {"tenant"} if "tenant" in request and not tenant_ok(request["tenant"]) else set()
    return bad | ({"priority"} if "priority" in request and not priority_ok(request["priority"]) else set())


async def nothing_started(herald: HeraldClient, key: Any) -> bool:
    """Whether no channel has a workflow under `key` (a key no workflow could have counts as nothing)."""
    if not (isinstance(key, str) and re.fullmatch(BUSINESS_KEY_PATTERN, key)):
        return True
    for channel in Channel:
        try:
            await herald.handle(key, channel).describe()
        except RPCError as error:
            if error.status is not RPCStatusCode.NOT_FOUND:
                raise
        else:
            return False
    return True


# ---- logs: no traceback may reach one -------------------------------------------------------------


class _Tracebacks(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback" in record.getMessage():
            self.records.append(record)


@pytest.fixture(scope="module")
def tracebacks() -> Iterator[_Tracebacks]:
    handler = _Tracebacks()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)


def assert_no_traceback(handler: _Tracebacks) -> None:
    found = [f"{r.name}: {r.getMessage()[:200]}" for r in handler.records]
    handler.records.clear()
    assert not found, found


# ---- the client: send and send_notice ---------------------------------------------------------------


async def _terminal(herald: HeraldClient, key: str, channel: Channel) -> None:
    final = await asyncio.wait_for(herald.wait(key, channel), TERMINAL_WITHIN)
    assert final.state.is_terminal, final


async def assert_as_asked(
    herald: HeraldClient, pool: AsyncConnectionPool, key: str, channel: Channel, tenant: str, asked: int | None
) -> None:
    """A closed intent's ledger row names its tenant, and each attempt went at a priority key no higher
    than the one asked for (a lower one is granted, a higher one is not)."""
    attempts = (await herald.status(key, channel)).attempts
    assert all(a.priority is not None and (asked is None or a.priority >= asked) for a in attempts), attempts
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT tenant FROM intents WHERE workflow_id = %s", (f"{key}/{channel.value}",))
        row = await cursor.fetchone()
    assert row is None or row[0] == tenant  # no row: it closed before any attempt


@SEARCH
@given(request=requests())
async def test_send_refuses_at_the_door_or_reaches_a_terminal_state(
    herald: HeraldClient, pool: AsyncConnectionPool, tracebacks: _Tracebacks, request: Any
) -> None:
    """HeraldClient.send: InvalidIntent naming fields and rules (a bad tenant or priority among them; no
    value echoed; nothing started), or an intent that closes, recorded for its tenant at no higher a
    priority than it asked for."""
    try:
        receipt = await herald.send(request)
    except InvalidIntent as refused:
        assert refused.problems and all(field and rule and "\n" not in rule for field, rule in refused.problems)
        assert not echoes_value(str(refused), request)
        assert named_by_their_rules(request) <= {field for field, _ in refused.problems}, refused.problems
        assert await nothing_started(herald, request.get("business_key") if isinstance(request, dict) else None)
    except IntentConflict:
        pass
    else:
        key, _, channel = receipt.workflow_id.rpartition("/")
        await _terminal(herald, key, Channel(channel))
        await assert_as_asked(
            herald, pool, key, Channel(channel), request.get("tenant", "shared"), request.get("priority")
        )
    assert_no_traceback(tracebacks)


@st.composite
def notices(
    draw: st.DrawFn, channels: st.SearchStrategy[list[Any]] = st.lists(requests(), max_size=3)
) -> dict[str, Any]:
    """A notice of entries as meant, or of strange ones; its tenant absent, valid or strange, and now and
    then left inside an entry (where a notice refuses it: one tenant per notice)."""
    keep_tenant_in_entries = draw(st.integers(0, 9)) == 0
    if draw(st.booleans()):  # every entry as meant, so a notice starts and its tenant and priorities are checked
        makes = draw(st.sampled_from([[sms_request], [email_request], [sms_request, email_request]]))
        drawn = [{**make(), **draw(meant)} for make in makes]
    else:
        drawn = draw(channels)
    entries = [{k: v for k, v in entry.items() if k != "business_key" and (k != "tenant" or keep_tenant_in_entries)}
               if isinstance(entry, dict) else entry for entry in drawn]  # fmt: skip
    key = draw(st.one_of(st.just(None), json_values))
    notice: dict[str, Any] = {"business_key": fresh_key() if key is None else key, "channels": entries}
    tenant = draw(st.sampled_from(["absent", "valid", "strange"]))
    if tenant != "absent":
        notice["tenant"] = draw(tenants if tenant == "valid" else near_misses | json_values)
    return notice


def notice_named_by_their_rules(notice: dict[str, Any]) -> set[str]:
    """The fields a refusal of `notice` must name: its tenant, and each entry's priority, when they break their
    rules (entries are not read one by one when there are more than channels)."""
    bad = {"tenant"} if "tenant" in notice and not tenant_ok(notice["tenant"]) else set()
    entries = notice["channels"] if len(notice["channels"]) <= len(Channel) else []
    return bad | {f"channels.{i}.priority" for i, entry in enumerate(entries)
                  if isinstance(entry, dict) and "priority" in entry and not priority_ok(entry["priority"])}  # fmt: skip


@SEARCH
@given(notice=notices())
async def test_send_notice_refuses_at_the_door_or_every_channel_closes(
    herald: HeraldClient, pool: AsyncConnectionPool, tracebacks: _Tracebacks, notice: dict[str, Any]
) -> None:
    """HeraldClient.send_notice: one refusal naming channels.<i>.<field> (a bad tenant or priority among
    them) that starts no channel, or one closed intent per channel, each for the notice's tenant at no
    higher a priority than its entry asked for."""
    try:
        receipt = await herald.send_notice(notice)
    except InvalidIntent as refused:
        assert refused.problems and all(field and rule for field, rule in refused.problems)
        assert notice_named_by_their_rules(notice) <= {field for field, _ in refused.problems}, refused.problems
        assert await nothing_started(herald, notice["business_key"])
    except IntentConflict:
        pass
    else:
        await asyncio.gather(*(_terminal(herald, receipt.business_key, channel) for channel in receipt.intents))
        asked = {Channel(entry["channel"]): entry.get("priority") for entry in notice["channels"]}
        for channel in receipt.intents:
            await assert_as_asked(
                herald, pool, receipt.business_key, channel, notice.get("tenant", "shared"), asked[channel]
            )
    assert_no_traceback(tracebacks)


# ---- the command line: starter.py send --file ----------------------------------------------------


@settings(SEARCH, max_examples=8)
@given(document=requests())
def test_starter_send_file_answers_in_one_line_or_starts(stack: LocalStack, document: Any) -> None:
    """`starter.py send --file F`: exit 0 having started, or exit 2 with one line naming the problem; never a
    traceback, whatever the file holds (invalid JSON text included)."""
    env = {**stack.config.service_env(stack.database_url), "PYTHONPATH": str(REPO)}
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8", errors="surrogatepass") as file:
        try:
            file.write(json.dumps(document, ensure_ascii=False))
        except (ValueError, RecursionError):
            file.write("[" * 5000)  # what json cannot write is written as the strangest text instead
        file.flush()
        done = subprocess.run([sys.executable, "starter.py", "send", "--file", file.name], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode in (0, 2), done.stderr
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    if done.returncode == 2:
        assert done.stderr.count("\n") == 1, done.stderr


# ---- the outbox: enqueue and the relay --------------------------------------------------------------


@pytest.fixture(scope="module")
async def outbox_pool(stack: LocalStack) -> AsyncIterator[AsyncConnectionPool]:
    async with open_pool(await create_outbox_database(stack.database_url, "fuzz_service"), max_size=2) as pool:
        yield pool


@SEARCH
@given(
    notice=notices(st.lists(requests(), max_size=2)) | json_values,
    raw=st.booleans(),
)
async def test_the_outbox_refuses_at_enqueue_or_the_relay_settles_every_row(
    outbox_pool: AsyncConnectionPool, herald: HeraldClient, tracebacks: _Tracebacks, notice: Any, raw: bool
) -> None:
    """enqueue() refuses a bad notice in the service's transaction (a bad tenant or priority named, no row
    written); a row written around it (by hand, by older code) is marked refused or relayed by the relay,
    which never raises."""
    async with outbox_pool.connection() as conn, conn.transaction():
        if raw:
            try:
                await conn.execute("INSERT INTO herald_outbox (business_key, notice) VALUES (%s, %s)",
                                   (fresh_key(), Jsonb(notice)))  # fmt: skip
            except (ValueError, RecursionError, psycopg.DataError, psycopg.errors.ProgramLimitExceeded):
                return  # what the service's driver or database cannot even write never reaches the relay
        else:
            try:
                await outbox.enqueue(conn, notice)
            except InvalidIntent as refused:
                assert refused.problems
                if isinstance(notice, dict) and isinstance(notice.get("channels"), list):
                    assert notice_named_by_their_rules(notice) <= {field for field, _ in refused.problems}
                    cursor = await conn.execute(
                        "SELECT count(*) FROM herald_outbox WHERE business_key = %s", (str(notice.get("business_key")),)
                    )
                    assert await cursor.fetchone() == (0,)
                return
    done = await OutboxRelay(outbox_pool, herald).relay_once()
    assert done.claimed >= 1 and done.retrying == 0, done
    assert_no_traceback(tracebacks)


# ---- the agent tool, over MCP ------------------------------------------------------------------------


def _sendable(arguments: dict[str, Any]) -> bool:
    """What JSON-RPC can carry: strict JSON in UTF-8 (no NaN, no lone surrogate), shallow enough for the
    client's own serialiser. What no client can send never reaches the server."""
    try:
        json.dumps(arguments, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):
        return False
    return _depth(arguments) < 100


def _depth(value: Any) -> int:
    depth, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        depth = max(depth, level)
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, level + 1) for child in children)
    return depth


calls = st.tuples(
    st.sampled_from(["notify_seller", "notify_member", "no_such_tool"]),
    st.dictionaries(st.sampled_from(["order_id", "action", "class_occurrence_id", "member_id", "priority", "tenant", "x"]),
                    json_values | near_misses | priorities | st.sampled_from(["ord_1001", "new_order", "cls_501", "mem_7"]),
                    max_size=5),
)  # fmt: skip


@settings(SEARCH, max_examples=3)
@given(batch=st.lists(calls, min_size=15, max_size=25))
async def test_the_agent_tool_answers_every_call_and_lives_on(
    stack: LocalStack, herald: HeraldClient, batch: list[tuple[str, dict[str, Any]]]
) -> None:
    """Any tool name and arguments, one session per batch: an error result or a structured answer for each
    call, and the server keeps serving to the last."""
    env = {**stack.config.service_env(stack.database_url), "HERALD_AGENT_CALLER": "eu-marketplace-agent"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "agent_tool"], env=env, cwd=str(REPO))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await asyncio.wait_for(session.initialize(), 30)
        for tool, arguments in batch:
            if not _sendable(arguments):
                continue
            try:
                result = await asyncio.wait_for(session.call_tool(tool, arguments), 30)
            except MCPError as refused:  # a JSON-RPC error answer: an unknown tool, named
                assert tool == "no_such_tool" and "Unknown tool" in str(refused), refused
            else:
                assert result.is_error or result.structured_content["outcome"] in ("started", "refused")
        assert (await asyncio.wait_for(session.list_tools(), 30)).tools


# ---- templates: publish and preview ------------------------------------------------------------------


@pytest.fixture(scope="module")
def template_root() -> Iterator[Path]:
    # Two folders deep in a private one: the test lists the grandparent, where "../../x" would land,
    # and /tmp itself changes under other processes (a listing of it failed once in CI).
    private = Path(tempfile.mkdtemp())
    root = private / "outer" / "inner" / "templates"
    shutil.copytree(REPO / "herald" / "templates", root)
    yield root
    shutil.rmtree(private)


# An e-mail version whose HTML part is markup and strange text around its placeholder: refused by a
# named rule, or published inside the templates folder (tests/unit/test_html_templates.py searches
# what accepted parts render).
html_pieces = st.sampled_from(['<p title="${merchant}">', "<p>${merchant}</p>", '<a href="${merchant}">', "<!--",
                               "<script>", "</", "<p title=", "onclick=", '"', "'", "&", "${merchant}", "$",
                               "<svg>", "{{"]) | strange_text  # fmt: skip
html_versions = st.lists(html_pieces, min_size=1, max_size=6).map(
    lambda pieces: "# channel: email\n# subject: Hi\n# field merchant: text max=60\nHello ${merchant}.\n# html:\n"
    + "".join(pieces)
)


@settings(SEARCH, max_examples=examples(150))
@given(template_id=strange_text | st.sampled_from(["order_receipt", "new_one", "promo/vip_offer", "../../x"]),
       version=json_values | st.integers(min_value=-3, max_value=100_001), text=strange_text | html_versions)  # fmt: skip
def test_publish_refuses_by_rule_and_never_writes_outside_its_folder(
    template_root: Path, template_id: Any, version: Any, text: str
) -> None:
    """publish(): PublishRefused naming the rule, or a version added inside the templates folder."""
    outside = sorted(p.name for p in template_root.parent.parent.iterdir())
    try:
        publish(template_id, version, text, root=template_root)
    except PublishRefused as refused:
        assert str(refused)
    assert sorted(p.name for p in template_root.parent.parent.iterdir()) == outside


@settings(SEARCH, max_examples=examples(150))
@given(template_id=st.sampled_from(["order_receipt", "order_receipt_email", "seller_new_order", "nope", "../x"]),
       version=st.sampled_from([1, 2, 0, 10**6, "latest"]),
       data=st.dictionaries(strange_text, json_values, max_size=5))  # fmt: skip
def test_preview_renders_or_names_the_rule(template_id: str, version: Any, data: dict[str, Any]) -> None:
    """A preview renders, or refuses with TemplateError naming the field; nothing else escapes."""
    try:
        render_message(template_id, version if isinstance(version, int) else 1, data, channel="sms")
    except TemplateError as refused:
        assert refused.problems and all(field for field, _ in refused.problems)


_MARKUP = re.compile(r"[<>\"']|&(?!amp;|lt;|gt;|quot;|#x27;)")


@settings(SEARCH, max_examples=examples(150))
@given(merchant=strange_text | st.sampled_from(['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>']))
def test_render_data_never_adds_markup_to_an_html_part(merchant: str) -> None:
    """Any merchant name: refused naming render_data.merchant, or rendered with the name verbatim in the
    text part and no markup character of its own in the HTML part (its '<', '>', quotes and '&' as references)."""
    try:
        rendered = render_message("order_receipt_email", 2, {**ORDER_DATA, "merchant": merchant}, channel="email")
    except TemplateError as refused:
        assert [field for field, _ in refused.problems] == ["render_data.merchant"]
        return
    neutral = render_message("order_receipt_email", 2, {**ORDER_DATA, "merchant": "Acme"}, channel="email")
    assert merchant in rendered.body
    assert rendered.html_body is not None and neutral.html_body is not None
    assert len(_MARKUP.findall(rendered.html_body)) == len(_MARKUP.findall(neutral.html_body))
