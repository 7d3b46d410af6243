"""A notice's story in the console: found by what an operator holds, told whole, never naming the person."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from herald.console.story import provider_event
from tests.console.ledger_rows import Seeded, lost_answer_notice, stopped_marketing_text


@pytest.fixture(scope="module")
async def seeded(pool: AsyncConnectionPool) -> Seeded:
    return await lost_answer_notice(pool)


def text_of(page: str) -> str:
    """The page's text as a reader sees it: tags dropped, whitespace collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


async def story(console: httpx.AsyncClient, seeded: Seeded) -> str:
    answer = await console.get("/notice", params={"key": seeded.business_key})
    assert answer.status_code == 200, answer.text
    return answer.text


def assert_no_person(page: str, seeded: Seeded) -> None:
    for secret in (seeded.phone, seeded.phone[1:], seeded.address, "secret body"):
        if secret:
            assert secret not in page


@pytest.mark.parametrize("holding", ["business_key", "sms", "sms_message_id", "sms_attempt_ref"])
async def test_each_identifier_an_operator_holds_leads_to_the_notice(
    console: httpx.AsyncClient, seeded: Seeded, holding: str
) -> None:
    """A business key, a workflow id, a provider message id or an attempt reference, searched, redirects to the story."""
    answer = await console.post("/find", data={"q": getattr(seeded, holding)})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/notice?key=" + quote(seeded.business_key, safe="")


async def test_the_story_shows_every_channel_side_by_side_from_request_to_verdict(
    console: httpx.AsyncClient, seeded: Seeded
) -> None:
    """Both channels, the request's facts, the attempt's route and policy, the lost answer, the lookup, the report's delay, the transitions."""
    page = await story(console, seeded)
    text = text_of(page)
    assert page.count('class="channel"') == 2
    assert 'data-channel="sms"' in page and 'data-channel="email"' in page
    for fact in (
        "order_receipt v1", "tenant acme", "category transactional", "priority 1",
        "provider twilio", "route twilio:+15005550006", "why this provider route transactional/*: twilio first",
        "admitted by policy v1 admitted", "submit unknown", "1 lookups, 1 reports, 3 observations",
        "ReadTimeout after the request was sent: the answer was lost", "found sent",
        "lookup by reference: one unclaimed message fits", seeded.sms_message_id,
        "lookup found the message the lost answer was about", "delivery report: delivered",
        "delivered since", "SendGrid delivered",
    ):  # fmt: skip
        assert fact in text, fact
    # Times after the attempt was prepared: the lost answer at +5.9 s, the lookup at +6.9 s; the
    # report stored 1.5 s after the provider's event.
    assert "+5.9 s" in text and "+6.9 s" in text
    assert re.search(r"stored [0-9:.]{12}; the provider's event [0-9:.]{12}, 1\.5 s before", text)
    assert_no_person(page, seeded)


async def test_each_workflow_links_into_the_temporal_web_ui(console: httpx.AsyncClient, seeded: Seeded) -> None:
    """Every channel links to its workflow's runs in the Web UI (its id encoded), and to its first run's history."""
    page = await story(console, seeded)
    runs = "http://127.0.0.1:8233/namespaces/default/workflows?query=" + quote(f'WorkflowId="{seeded.sms}"', safe="")
    assert f'href="{runs}"' in page.replace("&amp;", "&")
    assert re.search(
        r'href="http://127\.0\.0\.1:8233/namespaces/default/workflows/' + re.escape(quote(seeded.sms, safe=""))
        + r'/run-[0-9a-f]{16}/history"', page
    )  # fmt: skip


async def test_a_person_typed_in_any_spelling_is_found_by_fingerprint_and_shown_masked(
    console: httpx.AsyncClient, seeded: Seeded
) -> None:
    """A number typed with spaces and brackets lists the person's notices; the page shows it masked, never in clear."""
    digits = seeded.phone[1:]
    spelled = f"+{digits[0]} ({digits[1:4]}) {digits[4:7]}-{digits[7:]}"
    answer = await console.post("/find", data={"q": spelled})
    assert answer.status_code == 200, answer.text
    assert seeded.business_key in answer.text
    assert f"{seeded.phone[:3]}•••{seeded.phone[-2:]}" in answer.text
    assert_no_person(answer.text, seeded)
    assert digits[1:4] not in text_of(answer.text).replace(seeded.business_key, "")


async def test_an_address_is_found_without_regard_to_case(console: httpx.AsyncClient, seeded: Seeded) -> None:
    """An e-mail address typed in capitals finds the person's e-mail intent (the canonical form's fingerprint)."""
    answer = await console.post("/find", data={"q": seeded.address.upper()})
    assert answer.status_code == 200
    assert seeded.email in answer.text and seeded.address not in answer.text


async def test_a_person_in_an_address_is_refused_naming_the_parameter(
    console: httpx.AsyncClient, seeded: Seeded
) -> None:
    """A number in a GET's query string is refused 400, naming q, before anything is looked up."""
    answer = await console.get("/find", params={"q": seeded.phone})
    assert answer.status_code == 400
    assert "q: a phone number or an e-mail address is looked up with the search form (POST)" in answer.text
    assert seeded.phone not in answer.text


@pytest.mark.parametrize(
    ("form", "said"),
    [
        ({"q": "+1 555 12"}, "q: not a recipient Herald accepts"),
        ({"q": "a\x00b"}, "q: must be 1 to 320 characters on one line"),
        ({"q": "x" * 321}, "q: must be 1 to 320 characters on one line"),
        ({"key": "k"}, "key: not a parameter of this page (it takes: q)"),
        ({}, "q: must be 1 to 320 characters on one line"),
    ],
)
async def test_a_search_the_console_cannot_use_is_refused_naming_the_field_and_the_rule(
    console: httpx.AsyncClient, form: dict[str, str], said: str
) -> None:
    """A short number, a control character, an overlong query, an unknown field or none: 400 naming the field and the rule."""
    answer = await console.post("/find", data=form)
    assert answer.status_code == 400
    assert said in answer.text


async def test_an_unknown_notice_is_not_found(console: httpx.AsyncClient) -> None:
    """A key the ledger does not hold is 404, searched or opened."""
    assert (await console.post("/find", data={"q": "no_such:notice"})).status_code == 404
    assert (await console.get("/notice", params={"key": "no_such:notice"})).status_code == 404


async def test_a_suppressed_marketing_text_shows_the_stop_that_caused_it(
    console: httpx.AsyncClient, pool: AsyncConnectionPool
) -> None:
    """The story of a text suppressed after the person's STOP shows the verdict, the policy's reason and the STOP."""
    seeded = await stopped_marketing_text(pool)
    text = text_of(await story(console, seeded))
    assert "suppressed since" in text and "send policy: opt_out (keyword STOP)" in text
    assert "category marketing" in text and "policy_suppressed" in text
    assert "opt_out by inbound_keyword: keyword STOP" in text


async def test_every_page_is_kept_out_of_caches_frames_and_scripts(console: httpx.AsyncClient, seeded: Seeded) -> None:
    """Pages carry a CSP with no script, no framing, no referrer and no-store."""
    answer = await console.get("/notice", params={"key": seeded.business_key})
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["referrer-policy"] == "no-referrer"
    assert "<script" not in answer.text


async def test_a_search_body_is_read_only_up_to_its_bound(console: httpx.AsyncClient) -> None:
    """A form body over 4 KiB is refused 413 unread; one that is not UTF-8 is refused 400 naming the body."""
    assert (await console.post("/find", data={"q": "x" * 5000})).status_code == 413
    answer = await console.post(
        "/find", content=b"q=\xff\xfe", headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert answer.status_code == 400 and "request body: must be a form" in answer.text


def test_a_provider_time_on_the_minute_is_shown_as_its_minute_not_as_a_delay() -> None:
    """Twilio's carrier date gives minutes: a report stored 54.2 s into the minute is not "54.2 s" late;
    a provider time with seconds keeps its delay."""
    stored = datetime(2026, 12, 6, 15, 55, 54, 200_000, tzinfo=UTC)
    assert provider_event(stored, datetime(2026, 12, 6, 15, 55, tzinfo=UTC)) == (
        "the provider's event in the minute 15:55 (its clock gives minutes)"
    )
    assert provider_event(stored, stored - timedelta(seconds=1.5)).endswith(", 1.5 s before")
