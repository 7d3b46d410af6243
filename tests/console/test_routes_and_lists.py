"""The routes page (the report's numbers, outages, queue age over time) and the filtered lists, on the real ledger."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from herald.ledger.report import ledger_report
from tests.console.ledger_rows import lost_answer_notice
from tests.console.test_story import text_of
from tests.depth import examples


async def test_the_routes_page_shows_the_reports_numbers(
    console: httpx.AsyncClient, reader_pool: AsyncConnectionPool
) -> None:
    """Intents, coverage, delivered, unknown and duplicates on the page are ledger_report's, read the same way."""
    answer = await console.get("/routes")
    assert answer.status_code == 200
    report = await ledger_report(reader_pool)
    text = text_of(answer.text)
    assert f"intents {report.intents:,}" in text
    assert f"coverage {report.coverage_pct:.1f}%" in text and f"delivered {report.delivered_pct:.1f}%" in text
    assert f"unknown {report.unknown_pct:.1f}%" in text and f"duplicates sent {report.duplicates_sent}" in text
    # The report's own text is on the page, as starter.py report prints it (its coverage line: no clock in it).
    assert re.sub(r"\s+", " ", report.render().splitlines()[1]) in text


async def test_a_provider_in_outage_is_shown_with_the_time_it_began(
    console: httpx.AsyncClient, pool: AsyncConnectionPool
) -> None:
    """Three Unreachable marks within a minute: the routes page says the provider is in outage since the first."""
    provider = f"down-{secrets.token_hex(3)}"
    async with pool.connection() as conn:
        for n in range(3):
            await conn.execute(
                "INSERT INTO provider_marks (provider, mark, attempt_ref, marked_at) VALUES (%s, 'unreachable', %s, "
                "clock_timestamp() - %s * interval '1 second')",
                (provider, f"ref-{n}", 20 - 5 * n),
            )
    page = (await console.get("/routes")).text
    row = re.search(rf'<tr data-provider="{provider}">(.*?)</tr>', page, re.DOTALL)
    assert row is not None
    assert re.search(r"in outage since \d{4}-\d\d-\d\d [0-9:.]+ UTC \((2\d\.\d) s\)", text_of(row.group(1)))


async def test_queue_age_over_time_is_drawn_per_priority_and_tenant(
    console: httpx.AsyncClient, pool: AsyncConnectionPool
) -> None:
    """An attempt answered 65 s after it was prepared is a point of its tenant's line and of priority 1's, in SVG."""
    tenant = f"slow-{secrets.token_hex(3)}"
    seeded = await lost_answer_notice(pool, tenant=tenant, at=datetime.now(UTC) - timedelta(minutes=3))
    async with pool.connection() as conn:  # the SMS's submit answered (refused for now) 65 s after it was prepared
        await conn.execute(
            """INSERT INTO observations (workflow_id, seq, attempt_number, source, kind, applied, reason, observed_at)
               SELECT workflow_id, 9, 1, 'submit', 'retryable', false, 'late answer', prepared_at + interval '65 seconds'
                 FROM attempts WHERE workflow_id = %s AND number = 1""",
            (seeded.sms,),
        )
    page = (await console.get("/routes")).text
    charts = re.findall(r"<svg.*?</svg>", page, re.DOTALL)
    assert len(charts) == 2 and all('role="img"' in chart for chart in charts)
    assert f"tenant {tenant}" in charts[1]
    assert re.search(rf"<title>tenant {tenant}: 1 min 0[0-9] s at \d\d:\d\d UTC \(\d+ attempts\)</title>", charts[1])
    assert "<title>priority 1: " in charts[0]


@pytest.mark.parametrize(("hours", "status"), [("1", 200), ("6", 200), ("24", 200), ("2", 400), ("1h", 400)])
async def test_the_charts_window_is_one_of_three(console: httpx.AsyncClient, hours: str, status: int) -> None:
    """?hours= takes 1, 6 or 24, and refuses anything else naming the parameter and the rule."""
    answer = await console.get("/routes", params={"hours": hours})
    assert answer.status_code == status
    if status == 400:
        assert "hours: must be one of 1, 6, 24" in answer.text


# ---- lists ------------------------------------------------------------------------------------------


async def test_a_list_pages_by_keyset_through_every_match_once(
    console: httpx.AsyncClient, pool: AsyncConnectionPool
) -> None:
    """Five notices of one tenant, two a page: three pages by their 'older' links, each intent once, newest first."""
    tenant = f"list-{secrets.token_hex(3)}"
    base = datetime.now(UTC) - timedelta(hours=2)
    made = [await lost_answer_notice(pool, tenant=tenant, at=base + timedelta(minutes=n)) for n in range(5)]
    expected = [s.sms for s in reversed(made)]
    seen: list[str] = []
    url: str | None = f"/intents?tenant={tenant}&channel=sms&limit=2"
    pages = 0
    while url is not None:
        answer = await console.get(url)
        assert answer.status_code == 200, answer.text
        seen += re.findall(r'data-workflow="([^"]+)"', answer.text)
        older = re.search(r'<a href="([^"]+)" rel="next">', answer.text)
        url = older.group(1).replace("&amp;", "&") if older else None
        pages += 1
    assert (seen, pages) == (expected, 3)
    assert "OFFSET" not in open("herald/ledger/intent_pages.py").read().split('_PAGE = """')[1].split('"""')[0]


async def test_a_list_filters_by_state_channel_template_category_and_time(
    console: httpx.AsyncClient, pool: AsyncConnectionPool
) -> None:
    """Each filter narrows the list to the intents it names; a range before the notice lists none of it."""
    tenant = f"filter-{secrets.token_hex(3)}"
    seeded = await lost_answer_notice(pool, tenant=tenant)

    async def listed(**params: str) -> list[str]:
        answer = await console.get("/intents", params={"tenant": tenant, **params})
        assert answer.status_code == 200, answer.text
        return re.findall(r'data-workflow="([^"]+)"', answer.text)

    assert sorted(await listed()) == sorted([seeded.sms, seeded.email])
    assert await listed(channel="email") == [seeded.email]
    assert await listed(template="order_receipt") == [seeded.sms]
    assert sorted(await listed(state="delivered", category="transactional")) == sorted([seeded.sms, seeded.email])
    assert await listed(state="unknown") == []
    before = (seeded.created_at - timedelta(minutes=1)).isoformat()
    assert await listed(until=before) == []


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"state": "lost"}, "state: must be one of pending, submitting"),
        ({"channel": "fax"}, "channel: must be one of sms, email"),
        ({"category": "promo"}, "category: must be one of transactional, account, marketing"),
        ({"tenant": "Acme Corp"}, "tenant: must be a tenant id"),
        ({"template": "a/b"}, "template: must be a template id"),
        ({"limit": "500"}, "limit: must be a whole number from 1 to 200"),
        ({"limit": "0"}, "limit: must be a whole number from 1 to 200"),
        ({"since": "yesterday"}, "since: must be a date or a time in ISO 8601"),
        (
            {"since": "2026-01-01", "until": "2026-03-01"},
            "since: the range from since to until may span at most 31 days",
        ),
        ({"since": "2026-03-01", "until": "2026-01-01"}, "since: must be before until"),
        ({"until": "0001-01-01"}, "until: must be a time in the years 1971 to 9998"),
        ({"after": "not-a-position"}, "after: must be the position an older-page link gives"),
        ({"offset": "100"}, "offset: not a parameter of this page"),
    ],
)
async def test_each_parameter_is_refused_by_name_and_rule(
    console: httpx.AsyncClient, params: dict[str, str], said: str
) -> None:
    """A value outside a parameter's rule, an unbounded range or page, or an unknown parameter: 400 naming it."""
    answer = await console.get("/intents", params=params)
    assert answer.status_code == 400
    assert said in text_of(answer.text)


async def test_a_parameter_given_twice_is_refused(console: httpx.AsyncClient) -> None:
    """?state=a&state=b is not a choice between them: 400 naming state."""
    answer = await console.get("/intents?state=delivered&state=unknown")
    assert answer.status_code == 400 and "state: given more than once" in answer.text


NAMES = st.sampled_from(
    ["state", "channel", "template", "tenant", "category", "since", "until", "limit", "after", "person", "q", "x"]
)
VALUES = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["delivered", "sms", "email", "marketing", "acme", "50", "2026-12-01", "2026-12-01T10:00Z"]),
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()),
    st.builds(
        lambda d, w: f"{d.isoformat()}~{w}", st.datetimes(timezones=st.just(UTC)), st.text(min_size=1, max_size=20)
    ),
    st.integers(min_value=-(10**6), max_value=10**6).map(str),
    # person=: keyed fingerprints as a person's page links them, well formed or nearly.
    st.lists(
        st.builds(lambda k, h: f"{k}:{h}", st.from_regex(r"[a-z0-9.]{0,8}", fullmatch=True),
                  st.from_regex(r"[0-9a-fA-F]{63,65}", fullmatch=True)),
        min_size=0, max_size=10,
    ).map(",".join),  # fmt: skip
)


@settings(max_examples=examples(200), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(params=st.lists(st.tuples(NAMES, VALUES), max_size=6))
async def test_any_query_is_a_page_or_a_named_refusal(
    console: httpx.AsyncClient, params: list[tuple[str, str]]
) -> None:
    """Whatever the query string holds, the list answers 200 or 400 naming a parameter it was given, never an error."""
    answer = await console.get("/intents", params=params)
    assert answer.status_code in (200, 400), answer.text
    if answer.status_code == 400:
        refusal = re.search(r'<p class="refusal">([^:<]{1,40}): ', answer.text)
        assert refusal is not None, answer.text
        assert refusal.group(1) in {name[:40] for name, _ in params} | {"since"}
    else:
        query = parse_qs(urlparse(str(answer.url)).query)
        assert int(query.get("limit", ["50"])[0]) <= 200
