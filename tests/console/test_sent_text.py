"""Opening a notice's sent text on the console: recorded first, refused by name, erased when erased, POST only."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from devstack.processes import free_port, wait_for_port
from herald.console.__main__ import opener_pool, require_opener, require_reader, serve
from herald.console.sent_text import NOT_ENABLED
from herald.ledger.privacy import erase_recipient
from herald.settings import InvalidSetting
from tests.console.conftest import console_client
from tests.console.ledger_rows import Seeded, lost_answer_notice
from tests.console.test_story import text_of
from tests.depth import examples
from tests.intents import fresh_address, fresh_key
from tests.keys import SESSION_FINGERPRINT_KEYS, SESSION_KEYRING


@pytest.fixture
async def console(reader_pool: AsyncConnectionPool, opener: AsyncConnectionPool) -> AsyncIterator[httpx.AsyncClient]:
    """The console on loopback with opening enabled."""
    async with console_client(reader_pool, opener=opener) as client:
        yield client


@pytest.fixture(scope="module")
async def seeded(pool: AsyncConnectionPool) -> Seeded:
    return await lost_answer_notice(pool)


async def openings(reader_pool: AsyncConnectionPool, workflow_id: str) -> list[tuple[str, str, str]]:
    """(operator, reason, outcome) of every opening of `workflow_id`'s text, oldest first, as the console reads them."""
    async with reader_pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT operator, reason, outcome FROM text_openings WHERE workflow_id = %s ORDER BY id", (workflow_id,)
        )
        return [tuple(row) for row in await cursor.fetchall()]  # type: ignore[misc]


def opening(workflow_id: str, reason: str = "ticket T-1: customer disputes the text") -> dict[str, str]:
    return {"workflow": workflow_id, "reason": reason}


async def test_opening_records_its_row_and_then_shows_the_text_escaped(
    console: httpx.AsyncClient, reader_pool: AsyncConnectionPool, seeded: Seeded, caplog: pytest.LogCaptureFixture
) -> None:
    """The POST writes the opening (operator, reason, outcome) and answers the body, stamped with who and when, uncached, unlogged."""
    caplog.set_level(logging.DEBUG)
    reason = f"ticket {secrets.token_hex(3)}: what did we send?"
    answer = await console.post("/notice/text", data=opening(seeded.sms, reason))
    assert answer.status_code == 200, answer.text
    assert f"secret body for {seeded.phone}" in text_of(answer.text)
    assert re.search(r"opened by loopback at \d{4}-\d\d-\d\d [0-9:.]{12} UTC, reason: " + re.escape(reason),
                     text_of(answer.text))  # fmt: skip
    assert answer.headers["cache-control"] == "no-store"
    assert await openings(reader_pool, seeded.sms) == [("loopback", reason, "opened")]
    assert not [r for r in caplog.records if "secret body" in r.getMessage() or reason in r.getMessage()]


async def test_an_e_mails_subject_and_body_are_shown_as_text_never_as_markup(
    console: httpx.AsyncClient, pool: AsyncConnectionPool
) -> None:
    """A body and a subject holding tags come back escaped: the text as sent, not markup on the console's page."""
    workflow_id = f"{fresh_key('console_text')}/email"
    now = datetime.now(UTC)
    async with pool.connection() as conn:
        await conn.execute(
            """INSERT INTO intents (workflow_id, business_key, channel, recipient, template_id, template_version,
                   render_data, body, subject, content_sha256, intent_fingerprint, created_at, expires_at, tenant,
                   first_run_id)
               VALUES (%s, %s, 'email', %s, 'welcome_email', 1, %s, %s, %s, %s, %s, %s, %s, 'shared', 'run-1')""",
            (workflow_id, workflow_id.rsplit("/", 1)[0], fresh_address(), Jsonb({}), "<script>alert(1)</script> hi",
             "Your <b>order</b>", secrets.token_hex(32), secrets.token_hex(32), now, now + timedelta(hours=1)),
        )  # fmt: skip
    answer = await console.post("/notice/text", data=opening(workflow_id))
    assert answer.status_code == 200
    assert "&lt;script&gt;alert(1)&lt;/script&gt; hi" in answer.text and "<script>" not in answer.text
    assert "Your &lt;b&gt;order&lt;/b&gt;" in answer.text


async def test_a_ledger_that_refuses_the_opening_row_shows_no_text(
    console: httpx.AsyncClient, owner_pool: AsyncConnectionPool, reader_pool: AsyncConnectionPool, seeded: Seeded
) -> None:
    """When the ledger refuses the opening's INSERT, the answer is the ledger's 503 and holds no text; nothing is recorded."""
    marker = f"refuse-{secrets.token_hex(4)}"
    function, trigger = f"refuse_{marker.replace('-', '_')}", f"refuse_{marker.replace('-', '_')}_t"
    async with owner_pool.connection() as conn:
        await conn.execute(
            f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.reason = '{marker}' THEN RAISE EXCEPTION 'refused for the test'; END IF; RETURN NEW; END; $$"
        )
        await conn.execute(
            f"CREATE TRIGGER {trigger} BEFORE INSERT ON text_openings FOR EACH ROW EXECUTE FUNCTION {function}()"
        )
    try:
        answer = await console.post("/notice/text", data=opening(seeded.email, marker))
    finally:
        async with owner_pool.connection() as conn:
            await conn.execute(f"DROP TRIGGER {trigger} ON text_openings")
            await conn.execute(f"DROP FUNCTION {function}()")
    assert answer.status_code == 503
    assert "secret body" not in answer.text and seeded.address not in answer.text
    assert [o for o in await openings(reader_pool, seeded.email) if o[1] == marker] == []


async def test_an_erased_persons_text_says_erased_and_the_attempt_is_recorded(
    console: httpx.AsyncClient, pool: AsyncConnectionPool, reader_pool: AsyncConnectionPool
) -> None:
    """After erase_recipient, opening the text shows 'erased' and no text, records an 'erased' opening, and the story lists it."""
    seeded = await lost_answer_notice(pool)
    await erase_recipient(pool, recipient=seeded.phone, keyring=SESSION_KEYRING, operator="dpo", reason="request 7")
    answer = await console.post("/notice/text", data=opening(seeded.sms, "dispute after erasure"))
    assert answer.status_code == 200
    said = text_of(answer.text)
    assert re.search(r"erased ?: this person was erased", said) and "secret body" not in said
    assert await openings(reader_pool, seeded.sms) == [("loopback", "dispute after erasure", "erased")]
    story = text_of((await console.get("/notice", params={"key": seeded.business_key})).text)
    assert re.search(r"\d{4}-\d\d-\d\d [0-9:.]{12} UTC loopback dispute after erasure erased", story)


async def test_the_story_lists_every_opening_and_offers_the_form_per_channel(
    console: httpx.AsyncClient, pool: AsyncConnectionPool
) -> None:
    """Each channel has its POST form with a required reason; past openings are listed with operator, time, reason, outcome."""
    seeded = await lost_answer_notice(pool)
    for reason in ("first look", "second look"):
        assert (await console.post("/notice/text", data=opening(seeded.sms, reason))).status_code == 200
    page = (await console.get("/notice", params={"key": seeded.business_key})).text
    assert page.count('<form method="post" action="/notice/text" class="open-text">') == 2
    assert page.count('name="reason" required maxlength="500"') == 2
    said = text_of(page)
    assert re.search(r"UTC loopback first look opened .* UTC loopback second look opened", said)
    assert said.count("never opened") == 1  # the e-mail's
    assert "secret body" not in page


async def test_without_an_opener_login_the_story_says_opening_is_not_enabled(
    reader_pool: AsyncConnectionPool, seeded: Seeded
) -> None:
    """No opener configured: the story says so plainly, offers no form, and the POST is refused 403."""
    async with console_client(reader_pool) as client:
        page = (await client.get("/notice", params={"key": seeded.business_key})).text
        refused = await client.post("/notice/text", data=opening(seeded.sms))
    assert page.count(NOT_ENABLED) == 2 and "open-text" not in page
    assert refused.status_code == 403 and "secret body" not in refused.text


async def test_a_get_never_opens_a_text(
    console: httpx.AsyncClient, pool: AsyncConnectionPool, reader_pool: AsyncConnectionPool
) -> None:
    """GET (a link, a prefetch, a checker) is 405 and records nothing."""
    seeded = await lost_answer_notice(pool)
    answer = await console.get("/notice/text", params=opening(seeded.sms))
    assert answer.status_code == 405
    assert await openings(reader_pool, seeded.sms) == []


@pytest.mark.parametrize(
    ("form", "said"),
    [
        ({"workflow": "x/sms"}, "reason: required: why this text is opened"),
        ({"workflow": "x/sms", "reason": "   "}, "reason: required: why this text is opened"),
        ({"workflow": "x/sms", "reason": "r" * 501}, "reason: must be 1 to 500 characters on one line"),
        ({"workflow": "x/sms", "reason": "two\nlines"}, "reason: must be 1 to 500 characters on one line"),
        ({"workflow": "x/sms", "reason": "customer a.b@example.com"}, "reason: must not hold an e-mail address"),
        ({"workflow": "x/sms", "reason": "caller +1 555 260 0018"}, "reason: must not hold an e-mail address"),
        ({"reason": "why"}, "workflow: required"),
        ({"workflow": "w" * 401, "reason": "why"}, "workflow: must be 1 to 400 characters on one line"),
        ({"workflow": "x/sms", "reason": "why", "operator": "someone"}, "operator: not a parameter of this page"),
    ],
)
async def test_a_form_outside_its_rules_is_refused_by_name(
    console: httpx.AsyncClient, form: dict[str, str], said: str
) -> None:
    """A missing, blank, too long, multi-line or person-naming reason, a missing workflow, an unknown field: 400 naming it."""
    answer = await console.post("/notice/text", data=form)
    assert answer.status_code == 400
    assert said in text_of(answer.text)


async def test_an_unknown_workflow_is_not_found_and_the_attempt_is_recorded(
    console: httpx.AsyncClient, reader_pool: AsyncConnectionPool
) -> None:
    """A workflow id the ledger does not hold: 404 naming the field, recorded as 'refused'."""
    workflow_id = f"{fresh_key('console_none')}/sms"
    answer = await console.post("/notice/text", data=opening(workflow_id, "probing"))
    assert answer.status_code == 404 and "workflow: no intent has this workflow id" in answer.text
    assert await openings(reader_pool, workflow_id) == [("loopback", "probing", "refused")]


async def test_the_readers_login_lists_openings_but_cannot_write_or_open_them(reader_pool: AsyncConnectionPool) -> None:
    """herald_reader may SELECT text_openings; it may not INSERT one, nor call open_sent_text."""
    async with reader_pool.connection() as conn:
        await conn.execute("SELECT workflow_id, operator, reason, outcome, opened_at FROM text_openings LIMIT 1")
        for statement in (
            "INSERT INTO text_openings (workflow_id, operator, reason, outcome) VALUES ('w', 'o', 'r', 'opened')",
            "SELECT * FROM open_sent_text('w', 'o', 'r')",
        ):
            with pytest.raises((psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction)):
                async with conn.transaction():
                    await conn.execute(statement)
        # Not only the read-only transaction: the grants are what refuse.
        cursor = await conn.execute(
            "SELECT has_table_privilege('text_openings', 'INSERT'), "
            "has_function_privilege('open_sent_text(text, text, text)', 'EXECUTE')"
        )
        assert await cursor.fetchone() == (False, False)


async def test_the_openers_login_may_open_and_nothing_beside(opener: AsyncConnectionPool, seeded: Seeded) -> None:
    """herald_text_opener reads no column of intents, no data key, not text_openings; it cannot INSERT an opening or write the ledger."""
    async with opener.connection() as conn:
        for statement in (
            "SELECT recipient FROM intents LIMIT 1",
            "SELECT body FROM intents LIMIT 1",
            "SELECT workflow_id FROM intents LIMIT 1",
            "SELECT * FROM recipient_keys LIMIT 1",
            "SELECT * FROM text_openings LIMIT 1",
            "INSERT INTO text_openings (workflow_id, operator, reason, outcome) VALUES ('w', 'o', 'r', 'opened')",
            "UPDATE text_openings SET reason = 'r'",
            "INSERT INTO transitions (workflow_id, seq, at, from_state, to_state, reason, source) "
            "VALUES ('w', 1, now(), 'pending', 'pending', 'r', 'submit')",
            "SELECT * FROM erase_recipient(ARRAY['x'], 'x', 'o', 'r')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                async with conn.transaction():
                    await conn.execute(statement)


async def test_the_console_refuses_an_opener_login_that_may_do_more(
    settings: object, reader_pool: AsyncConnectionPool, opener: AsyncConnectionPool
) -> None:
    """The services' login or the reader's given as the opener is refused naming the variable; the opener as the reader too."""
    url = settings.database_url.get_secret_value()  # type: ignore[attr-defined]
    async with opener_pool(url, 5.0) as services:
        with pytest.raises(InvalidSetting) as raised:
            await require_opener(services)
    assert str(raised.value).startswith("HERALD_CONSOLE_OPENER_DATABASE_URL: must be a login of herald_text_opener")
    with pytest.raises(InvalidSetting) as raised:
        await require_opener(reader_pool)  # it reads intents' columns: more than the opener may
    assert str(raised.value).startswith("HERALD_CONSOLE_OPENER_DATABASE_URL: must be a login of herald_text_opener")
    with pytest.raises(InvalidSetting) as raised:
        await require_reader(opener)
    assert str(raised.value).startswith("HERALD_CONSOLE_DATABASE_URL: must be a login of herald_reader")


async def test_opening_is_append_only(
    owner_pool: AsyncConnectionPool, console: httpx.AsyncClient, seeded: Seeded
) -> None:
    """Even the ledger's owner cannot rewrite or delete an opening."""
    assert (await console.post("/notice/text", data=opening(seeded.sms, "for the record"))).status_code == 200
    async with owner_pool.connection() as conn:
        for statement in ("UPDATE text_openings SET reason = 'nothing happened'", "DELETE FROM text_openings"):
            with pytest.raises(psycopg.errors.RaiseException, match="ledger table text_openings is append-only"):
                async with conn.transaction():
                    await conn.execute(statement)


NAMES = st.sampled_from(["workflow", "reason", "q", "operator"])
VALUES = st.one_of(st.text(max_size=40), st.sampled_from(["x/sms", "ticket 1"]), st.text(min_size=495, max_size=510))


@settings(max_examples=examples(100), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(fields=st.lists(st.tuples(NAMES, VALUES), max_size=4), raw=st.one_of(st.none(), st.binary(max_size=200)))
async def test_any_form_body_is_an_answer_or_a_named_refusal(
    console: httpx.AsyncClient, fields: list[tuple[str, str]], raw: bytes | None
) -> None:
    """Whatever the body holds (fields, or raw bytes), the answer is 200, 404 or 400 (naming the field it was given), never an error."""
    content = raw if raw is not None else httpx.QueryParams(fields).__str__().encode()
    answer = await console.post(
        "/notice/text", content=content, headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert answer.status_code in (200, 400, 404), answer.text
    if answer.status_code == 400 and raw is None:
        refusal = re.search(r'<p class="refusal">([^:<]{1,40}): ', answer.text)
        assert refusal is not None, answer.text
        assert refusal.group(1) in {name[:40] for name, _ in fields} | {"workflow", "reason", "request body"}


async def test_python_m_herald_console_refuses_to_start_on_an_opener_login_that_may_do_more(
    settings: object, reader_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The services' login given as HERALD_CONSOLE_OPENER_DATABASE_URL stops the console at start, in one line naming it."""
    for name in [name for name in os.environ if name.startswith("HERALD_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HERALD_FINGERPRINT_KEY_FILES", str(SESSION_FINGERPRINT_KEYS))
    monkeypatch.setenv("HERALD_CONSOLE_DATABASE_URL", reader_url)
    monkeypatch.setenv("HERALD_CONSOLE_OPENER_DATABASE_URL", settings.database_url.get_secret_value())  # type: ignore[attr-defined]
    with pytest.raises(InvalidSetting) as raised:
        await serve()
    assert str(raised.value).startswith("HERALD_CONSOLE_OPENER_DATABASE_URL: must be a login of herald_text_opener")


async def test_python_m_herald_console_with_an_opener_login_opens_texts(
    reader_url: str, opener_url: str, pool: AsyncConnectionPool
) -> None:
    """The process given both logins starts, and its story's form opens a text (the wiring of __main__)."""
    seeded = await lost_answer_notice(pool)
    port = free_port()
    env = {**os.environ, "HERALD_FINGERPRINT_KEY_FILES": str(SESSION_FINGERPRINT_KEYS),
           "HERALD_CONSOLE_DATABASE_URL": reader_url, "HERALD_CONSOLE_OPENER_DATABASE_URL": opener_url,
           "HERALD_CONSOLE_PORT": str(port)}  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "herald.console", env=env, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await asyncio.to_thread(wait_for_port, "127.0.0.1", port, 30)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            answer = await client.post("/notice/text", data=opening(seeded.sms, "from the process"))
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 15)
    assert answer.status_code == 200 and f"secret body for {seeded.phone}" in answer.text
