"""The console's page times on a ledger of many intents: `python -m bench.console_pages [--intents 100000]`.

Not a test: figures. An embedded PostgreSQL of its own (a temporary folder, migrated), filled in bulk
with a month of intents shaped like the demo's (SMS and e-mail, 20 tenants, 20,000 people; an
attempt, three transitions, three observations and a stored report each, a retry on one in ten,
`unknown` on one in fifty), then each page asked through the console app as the console's login
(herald_reader, read-only, the 5 s statement timeout), ROUNDS times: the median and the slowest.

`--ledger DIR` keeps the filled server's data in DIR and reuses it on the next run (the fill takes
minutes at 100,000 intents; a kept ledger's intents age with it, so its last hour thins out).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import secrets
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import httpx

from devstack.embedded_postgres import start_embedded_postgres
from herald.console.__main__ import console_pool, require_reader
from herald.console.app import build_console
from herald.ledger.migrate import apply_migrations
from herald.ledger.roles import CONSOLE_LOGIN, READER_ROLE, ensure_app_login
from herald.ledger.store import open_pool
from herald.privacy.fingerprints import Keyring
from herald.settings import ConsoleSettings

ROUNDS = 7
PEOPLE = 20_000
TENANTS = 20
SPAN = timedelta(days=30)

# One statement per table, every row derived from its intent's number i (1..n).
_FILL = [
    """INSERT INTO intents (workflow_id, business_key, channel, recipient, template_id, template_version, render_data,
                           body, content_sha256, intent_fingerprint, created_at, expires_at, first_run_id, category,
                           recipient_fingerprint, tenant)
       SELECT 'bench:k' || i || CASE WHEN i %% 5 = 0 THEN '/email' ELSE '/sms' END, 'bench:k' || i,
              CASE WHEN i %% 5 = 0 THEN 'email' ELSE 'sms' END, 'x', 'template_' || (i %% 5), 1, '{}', 'body',
              md5(i::text) || md5(i::text), md5(i::text), %(now)s - (i * %(step)s), %(now)s - (i * %(step)s) + interval '1 day',
              'run-' || i, CASE WHEN i %% 7 = 0 THEN 'marketing' ELSE 'transactional' END,
              (%(fingerprints)s::text[])[1 + i %% %(people)s], 'tenant' || (i %% %(tenants)s)
         FROM generate_series(1, %(n)s) i""",
    """INSERT INTO attempts (attempt_ref, workflow_id, number, prepared_at, provider, route_reason, policy_version,
                            policy_decision, priority, fairness_weight)
       SELECT 'att-' || i || '-' || a, workflow_id, a, created_at + a * interval '1 second',
              CASE WHEN channel = 'email' THEN 'sendgrid' ELSE 'twilio' END, 'route built-in', 1, 'allow', 2, 1
         FROM (SELECT substring(workflow_id from 8 for position('/' in workflow_id) - 8)::int AS i, workflow_id,
                      channel, created_at FROM intents WHERE business_key LIKE 'bench:k%%') x,
              generate_series(1, CASE WHEN i %% 10 = 0 THEN 2 ELSE 1 END) a""",
    """INSERT INTO receipt_inbox (provider, provider_message_id, provider_status, attempt_ref, provider_event_at, payload,
                                 received_at)
       SELECT a.provider, 'SM' || md5(a.attempt_ref), 'delivered', a.attempt_ref, a.prepared_at + interval '2 seconds',
              '{}', a.prepared_at + interval '3 seconds'
         FROM attempts a WHERE a.attempt_ref LIKE 'att-%%'""",
    """INSERT INTO observations (workflow_id, seq, attempt_number, source, kind, provider_id, provider_status, applied,
                                reason, inbox_id, observed_at)
       SELECT a.workflow_id, (a.number - 1) * 3 + o, a.number,
              CASE o WHEN 1 THEN 'submit' ELSE 'report' END, CASE o WHEN 1 THEN 'accepted' ELSE 'status' END,
              'SM' || md5(a.attempt_ref), CASE o WHEN 1 THEN 'queued' WHEN 2 THEN 'sent' ELSE 'delivered' END, true,
              'bench', CASE o WHEN 3 THEN r.id END, a.prepared_at + o * interval '1 second'
         FROM attempts a JOIN receipt_inbox r ON r.attempt_ref = a.attempt_ref, generate_series(1, 3) o
        WHERE a.attempt_ref LIKE 'att-%%'""",
    """INSERT INTO transitions (workflow_id, seq, at, from_state, to_state, reason, source, attempt_number)
       SELECT workflow_id, t, created_at + t * interval '1 second',
              (ARRAY['pending', 'submitting', 'accepted'])[t],
              CASE WHEN t = 3 AND i %% 50 = 0 THEN 'unknown' ELSE (ARRAY['submitting', 'accepted', 'delivered'])[t] END,
              'bench', (ARRAY['submit', 'submit', 'report'])[t], 1
         FROM (SELECT substring(workflow_id from 8 for position('/' in workflow_id) - 8)::int AS i, workflow_id,
                      created_at FROM intents WHERE business_key LIKE 'bench:k%%') x, generate_series(1, 3) t""",
    "ANALYZE",
]


def _people(keyring: Keyring) -> tuple[list[str], list[str]]:
    numbers = [f"+1555{index:07d}" for index in range(PEOPLE)]
    return numbers, [keyring.recipient(number) for number in numbers]


async def _fill(owner_url: str, n: int, fingerprints: list[str]) -> float:
    started = time.monotonic()
    params = {"now": datetime.now(UTC), "step": SPAN / n, "n": n, "people": PEOPLE, "tenants": TENANTS,
              "fingerprints": fingerprints}  # fmt: skip
    async with open_pool(owner_url, max_size=1, timeout=600) as pool, pool.connection() as conn:
        for statement in _FILL:
            await conn.execute(statement, params)
    return time.monotonic() - started


def _client(app: object) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app, client=("127.0.0.1", 50_000))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8240")


async def _time(
    client: httpx.AsyncClient, method: str, url: str, data: dict[str, str] | None, together: int = 1
) -> tuple[int, list[float]]:
    """Each round's time to the last of `together` requests sent at once."""
    times, status = [], 0
    for _ in range(ROUNDS):
        started = time.perf_counter()
        answers = await asyncio.gather(*(client.request(method, url, data=data) for _ in range(together)))
        times.append((time.perf_counter() - started) * 1000)
        status = max(answer.status_code for answer in answers)
    return status, times


# The people's fingerprint key: fixed, so a kept ledger (--ledger) is found by the same numbers again.
_KEY = hashlib.sha256(b"herald console bench").digest()


async def _filled_with(owner_url: str) -> int | None:
    """The intents a kept ledger was filled with, or None when it is new."""
    async with open_pool(owner_url, max_size=1) as pool, pool.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM intents WHERE business_key LIKE 'bench:k%%'")
        (count,) = await cursor.fetchone()  # type: ignore[misc]
    return count or None


async def measure(n: int, ledger: Path | None = None) -> str:
    folder = ledger or Path(tempfile.mkdtemp(prefix="herald-console-bench-"))
    server = start_embedded_postgres(folder / "pgdata")
    try:
        owner = server.get_uri()
        await apply_migrations(owner)
        reader = ensure_app_login(owner, secrets.token_urlsafe(12), CONSOLE_LOGIN, READER_ROLE)
        keyring = Keyring.configured({"bench": _KEY}, None)
        assert keyring is not None
        numbers, fingerprints = _people(keyring)
        kept = await _filled_with(owner)
        if kept is not None and kept != n:
            raise SystemExit(f"--ledger {folder}: holds {kept:,} intents, not --intents {n:,}")
        filled = 0.0 if kept else await _fill(owner, n, fingerprints)
        middle = n // 2
        day_ago = (datetime.now(UTC) - timedelta(days=1)).isoformat()
        month = {"since": (datetime.now(UTC) - timedelta(days=30)).isoformat()}
        pages = [
            ("a notice's story (2 attempts)", "GET", f"/notice?key=bench:k{middle - middle % 10}", None),
            ("find by business key (303)", "POST", "/find", {"q": f"bench:k{middle}"}),
            ("find by provider message id (303)", "POST", "/find", {"q": f"SM{_md5(f'att-{middle}-1')}"}),
            ("find a person by number (their notices)", "POST", "/find", {"q": numbers[middle % PEOPLE]}),
            ("intents, last day, newest 50", "GET", "/intents", None),
            ("intents, last day, state unknown", "GET", f"/intents?state=unknown&since={_q(day_ago)}", None),
            ("intents, 30 days, one tenant, 200 a page", "GET", f"/intents?tenant=tenant3&limit=200&since={_q(month['since'])}", None),
            ("intents, 30 days, state unknown (the rare filter)", "GET", f"/intents?state=unknown&since={_q(month['since'])}", None),
            ("intents, 30 days, template_4 email marketing", "GET",
             f"/intents?template=template_4&channel=email&category=marketing&since={_q(month['since'])}", None),
        ]  # fmt: skip
        async with console_pool(reader, ConsoleSettings().query_timeout) as pool:
            await require_reader(pool)
            app = build_console(pool, keyring, ConsoleSettings(), "default")
            # The routes page as it is when its report is computed for the request (no reading kept).
            computing = build_console(pool, keyring, ConsoleSettings(), "default", report_fresh_for=0)
            transport = httpx.ASGITransport(app, client=("127.0.0.1", 50_000))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8240") as client, \
                    _client(computing) as fresh:  # fmt: skip
                source = f"filled in {filled:.0f} s" if filled else "a kept ledger"
                lines = [f"console page times at {n:,} intents ({source}); {ROUNDS} rounds each, "
                         "in ms: median, slowest", ""]  # fmt: skip
                lines.append("| page | status | median ms | slowest ms |\n|---|--:|--:|--:|")
                for label, method, url, data in pages:
                    status, times = await _time(client, method, url, data)
                    lines.append(f"| {label} | {status} | {statistics.median(times):,.0f} | {max(times):,.0f} |")
                routes = [
                    ("routes, computing the report (ledger_report + the 1 h charts)", fresh, "/routes", 1),
                    ("routes, 24 h charts, computing the report", fresh, "/routes?hours=24", 1),
                    ("routes, two operators at once, computing (each one's wait)", fresh, "/routes", 2),
                    ("routes, the report of the last 15 s (every later reader)", client, "/routes", 1),
                ]
                for label, reader, url, together in routes:
                    if reader is client:
                        await client.get("/routes")  # the reading every later reader within 15 s is served
                    status, times = await _time(reader, "GET", url, None, together)
                    lines.append(f"| {label} | {status} | {statistics.median(times):,.0f} | {max(times):,.0f} |")
        return "\n".join(lines)
    finally:
        server.cleanup()


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()  # noqa: S324 (the fill's own ids, not a secret)


def _q(text: str) -> str:
    return quote(text, safe="")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.console_pages", description=__doc__.splitlines()[0])
    parser.add_argument("--intents", type=int, default=100_000)
    parser.add_argument("--ledger", type=Path, help="keep the filled ledger in this folder and reuse it")
    args = parser.parse_args()
    print(asyncio.run(measure(args.intents, args.ledger)))


if __name__ == "__main__":
    main()
