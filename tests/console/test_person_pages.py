"""A person's notices, paged: typed in a POST body, walked on by keyed fingerprint, never by their number."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from herald.console import app
from tests.console.ledger_rows import one_persons_notices
from tests.console.test_story import text_of
from tests.intents import fresh_recipient
from tests.keys import SESSION_KEYRING


def _next(page: str) -> str | None:
    older = re.search(r'<a href="([^"]+)" rel="next">', page)
    return older.group(1).replace("&amp;", "&") if older else None


async def test_a_persons_notices_are_walked_page_by_page_with_no_repeat_and_no_gap(
    console: httpx.AsyncClient, pool: AsyncConnectionPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seven notices of one person (two created at the same instant), two a page: four pages, each notice once, newest first."""
    monkeypatch.setattr(app, "PERSON_SHOWN", 2)
    phone = fresh_recipient()
    base = datetime.now(UTC) - timedelta(hours=3)
    times = [base + timedelta(minutes=m) for m in (0, 10, 20, 20, 30, 40, 50)]
    made = await one_persons_notices(pool, phone, times)
    await one_persons_notices(pool, fresh_recipient(), [base + timedelta(minutes=25)])  # someone else's, between
    expected = [w for _, w in sorted(zip(times, made, strict=True), reverse=True)]

    first = await console.post("/find", data={"q": phone})
    assert first.status_code == 200, first.text
    seen = re.findall(r'data-workflow="([^"]+)"', first.text)
    url, pages = _next(first.text), 1
    while url is not None:
        assert phone not in url and phone[1:] not in url  # the number never in an address
        query = parse_qs(urlparse(url).query)
        assert query["person"] == [SESSION_KEYRING.recipient(phone)] and query["limit"] == ["2"]
        answer = await console.get(url)
        assert answer.status_code == 200, answer.text
        assert phone not in answer.text and phone[1:] not in answer.text
        seen += re.findall(r'data-workflow="([^"]+)"', answer.text)
        url, pages = _next(answer.text), pages + 1
    assert (seen, pages) == (expected, 4)


async def test_a_person_with_one_page_of_notices_gets_no_older_link(
    console: httpx.AsyncClient, pool: AsyncConnectionPool
) -> None:
    """Fewer notices than a page: all shown, counted, and no link onwards."""
    phone = fresh_recipient()
    made = await one_persons_notices(pool, phone, [datetime.now(UTC) - timedelta(minutes=m) for m in (1, 2)])
    answer = await console.post("/find", data={"q": phone})
    assert sorted(re.findall(r'data-workflow="([^"]+)"', answer.text)) == sorted(made)
    assert "2 in the last 366 days" in text_of(answer.text) and _next(answer.text) is None


@pytest.mark.parametrize(
    "person",
    [
        "abc",
        "0" * 64,  # a bare SHA-256: a number could be recovered from it by trying them all
        "k1:" + "0" * 63,
        "k1:" + "G" * 64,
        "k 1:" + "0" * 64,
        ",".join(["k1:" + "0" * 64] * 9),
        "k1:" + "0" * 64 + ",",
        "+15005550006",
    ],
)
async def test_a_malformed_fingerprint_is_refused_by_name(console: httpx.AsyncClient, person: str) -> None:
    """Anything but 1 to 8 keyed fingerprints (key id ':' 64 lower-case hex) in person= is 400 naming person."""
    answer = await console.get("/intents", params={"person": person})
    assert answer.status_code == 400
    assert "person: must be the keyed fingerprints a person's page links" in text_of(answer.text)


async def test_a_persons_list_spans_a_year_and_no_more(console: httpx.AsyncClient) -> None:
    """With person=, a range up to 366 days is a page (31 without); beyond it is refused naming since."""
    person = SESSION_KEYRING.recipient(fresh_recipient())
    year = {"person": person, "since": "2025-12-06", "until": "2026-12-06"}
    assert (await console.get("/intents", params=year)).status_code == 200
    longer = await console.get("/intents", params={**year, "since": "2025-12-01"})
    assert longer.status_code == 400
    assert "since: the range from since to until may span at most 366 days" in text_of(longer.text)
    without = await console.get("/intents", params={"since": "2025-12-06", "until": "2026-12-06"})
    assert "at most 31 days (366 for one person)" in text_of(without.text)
