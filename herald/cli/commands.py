"""Herald's command line for services and operators (`starter.py` at the repository's top runs it).

    python starter.py send --key order_receipt:pay_157 --to +15551230001 --template order_receipt \\
        --version 1 --data order_ref=ord_1 --data amount=42.50 --data currency=EUR --data merchant=Shop
    python starter.py send --file intent.json     # or {"business_key": ..., "channels": [{...sms}, {...email}]}
    python starter.py status order_receipt:pay_157
    python starter.py cancel order_receipt:pay_157 --reason "seat filled" --operator alice
    python starter.py report
    python starter.py --help                      # every command, with examples; COMMAND --help for one

Every command checks all of its input (arguments, files, JSON, render data and the settings it
uses) before it opens any connection, so a mistake is reported as that mistake even when Temporal
or PostgreSQL is down. Exit codes: 0 done; 2 bad input or settings, as one line naming the option
(or variable) and the rule, never the value typed; 1 a service that failed or could not be
reached, as one line; 3 `erase` done in part (an intent was still running: run it again later);
130 interrupted.

Connection settings come from HERALD_* variables; when they are unset and the
local stack is running, from the `stack.env` file it writes in its state folder
(HERALD_STATE_DIR, `.state` by default). Only `demo` needs the checkout's devstack/.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psycopg
from temporalio.exceptions import TemporalError
from temporalio.service import RPCError

from herald import cli_input
from herald.cli_input import CliInputError, OneLineArgumentParser
from herald.cli_services import Services, ServiceUnreachable, database_url
from herald.errors import HeraldError, InvalidIntent
from herald.intent import IntentRequest, build_intent, describe_validation_error, parse_request
from herald.notice import NoticeRequest, parse_notice
from herald.settings import REPO_ROOT, InvalidSetting, Settings, load_settings

if TYPE_CHECKING:
    from herald.client import HeraldClient
    from herald.temporal_erasure import ExecutionErasure

PROG = "python starter.py"
# `erase` did what it could, but an intent was still running (or a deletion unconfirmed): run it again later.
EXIT_ERASE_INCOMPLETE = 3


def services() -> Services:
    """The connections of one command, with settings from the environment (read late, on first use)."""
    return Services(lambda: _settings())


def _settings() -> Settings:
    """HERALD_* variables over the variables a running local stack exports to `<state folder>/stack.env`."""
    env_file = Path(os.environ.get("HERALD_STATE_DIR", "").strip() or REPO_ROOT / ".state") / "stack.env"
    merged: dict[str, str] = {}
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            name, _, value = line.partition("=")
            if name:
                merged[name] = value
    merged.update(os.environ)
    return load_settings(merged)


# --- send --------------------------------------------------------------------------------------

# The options that build a request on the command line, which --file replaces as a whole.
_REQUEST_OPTIONS = (("key", "--key"), ("to", "--to"), ("template", "--template"), ("version", "--version"),
                    ("data", "--data"), ("channel", "--channel"), ("tenant", "--tenant"),
                    ("priority", "--priority"))  # fmt: skip


def send_request(args: argparse.Namespace) -> IntentRequest | NoticeRequest:
    """The request of `send`, validated and rendered (so nothing can be refused after connecting)."""
    given = [option for dest, option in _REQUEST_OPTIONS if getattr(args, dest) is not None]
    now = datetime.now(UTC)
    if args.file is not None:
        if given:
            raise CliInputError("--file", f"holds the whole request: leave out {', '.join(given)}")
        raw = cli_input.read_json_object(args.file, "--file")
        if "channels" in raw:
            notice = parse_notice(raw)
            for request in notice.requests():
                build_intent(request, now)  # renders: a data or template problem is found here
            return notice
        request = parse_request(raw)
        build_intent(request, now)
        return request
    for dest, option in _REQUEST_OPTIONS[:4]:
        if getattr(args, dest) is None:
            raise CliInputError(option, "required (or give the whole request with --file)")
    data = cli_input.render_data(args.data or [], _field_kinds(args.template, args.version))
    raw = {"business_key": args.key, "channel": args.channel or "sms", "recipient": args.to,
           "template_id": args.template, "template_version": args.version, "render_data": data}  # fmt: skip
    # Checked by the model, like every other field, and named as typed (--tenant, --priority).
    if args.tenant is not None:
        raw["tenant"] = args.tenant
    if args.priority is not None:
        raw["priority"] = cli_input.priority_key(args.priority)
    try:
        request = parse_request(raw)
        build_intent(request, now)
    except InvalidIntent as refused:  # named as typed: --to, not recipient
        raise InvalidIntent(cli_input.name_options(refused.problems)) from None
    return request


def _field_kinds(template_id: str, version: int | str) -> dict[str, str]:
    """The kind of each field of the template, or none when there is no such template (the intent's
    validation then says so, by field)."""
    from herald.templates import TemplateError, load_template, resolve_version

    try:
        template = load_template(template_id, resolve_version(template_id, version))
    except TemplateError:
        return {}
    return {spec.name: spec.kind for spec in template.field_specs}


async def cmd_send(args: argparse.Namespace, services: Services) -> int:
    # Settings first (the stack's stack.env included): the intent is fingerprinted as it is built,
    # here and again in the client, under the keys they name. A key missing is refused once the
    # request is found sound, where build_intent fingerprints it.
    services.settings()
    request = send_request(args)
    herald = await services.herald()  # Temporal first: a send without it can do nothing
    async with services.vault() as vault:  # seals personal fields with the recipient's key (ledger)
        return await _send(args, request, herald.with_vault(vault))


async def _send(args: argparse.Namespace, request: IntentRequest | NoticeRequest, herald: HeraldClient) -> int:
    if isinstance(request, NoticeRequest):
        receipt = await herald.send_notice(request)
        for channel, sent in receipt.intents.items():
            print(
                f"intent {sent.workflow_id} ({channel.value}) started or attached (content sha256 {sent.content_sha256[:16]}...)"
            )
        if args.wait:
            for channel in receipt.intents:
                final = await herald.wait(request.business_key, channel)
                print(f"final state ({channel.value}): {final.state.value}")
        return 0
    sent = await herald.send(request)
    print(f"intent {sent.workflow_id} started or attached (content sha256 {sent.content_sha256[:16]}...)")
    if args.wait:
        final = await herald.wait(request.business_key, request.channel)
        print(f"final state: {final.state.value}")
    return 0


# --- status, cancel, demo, report --------------------------------------------------------------


async def cmd_status(args: argparse.Namespace, services: Services) -> int:
    if args.channel is None:
        return await _notice_status(args, services)
    from herald.intent import workflow_id_for
    from herald.ledger.store import intent_history

    url = services.optional_ledger_url()
    herald = await services.herald()
    live = await herald.status(args.key, args.channel)
    print(f"intent      {live.workflow_id}")
    print(f"template    {live.template_id} v{live.template_version}   content sha256 {live.content_sha256}")
    print(f"state       {live.state.value}" + (f"   closed by {live.closed_by}" if live.closed_by else ""))
    print(f"tenant      {live.tenant}")
    for attempt in live.attempts:
        print(
            f"attempt {attempt.number}   ref {attempt.attempt_ref}   "
            f"submit {attempt.submit_result.value if attempt.submit_result else '-'}   "
            f"provider {attempt.provider_id or '-'} {attempt.provider_status.value if attempt.provider_status else ''}"
            f"   lookups {attempt.lookups}"
            + (f"   retry after {attempt.retry_delay_seconds:.1f}s" if attempt.retry_delay_seconds else "")
            + (f"   priority {attempt.priority}" if attempt.priority is not None else "")
            + (f" weight {attempt.fairness_weight:g}" if attempt.fairness_weight is not None else "")
            + ("   SEEN AFTER PRESUMED NOT ACCEPTED" if attempt.seen_after_presumed_absent else "")
        )
    if url is None:
        print("(set DATABASE_URL to include the ledger's transitions and observations)")
        return 0
    async with services.ledger(url) as pool:
        history = await intent_history(pool, workflow_id_for(args.key, args.channel))
        requests = await _recipients_requests(pool, workflow_id_for(args.key, args.channel), args.channel)
    if history is None:
        print("ledger: no row yet")
        return 0
    print("transitions (ledger):")
    for t in history["transitions"]:
        print(
            f"  {t['seq']:>3} {t['at']:%H:%M:%S.%f} {t['from_state']:>17} -> {t['to_state']:<17} [{t['source']}] {t['reason']}"
        )
    print("observations (ledger):")
    for o in history["observations"]:
        verdict = "applied" if o["applied"] else "ignored"
        print(
            f"  {o['seq']:>3} attempt {o['attempt_number'] or '-'} [{o['source']}] {o['kind']} "
            f"{o['provider_status'] or ''} {verdict}: {o['reason']}"
        )
    print("the recipient's requests on this channel (ledger):" + ("" if requests else " none"))
    for r in requests:
        category = f" ({r.category})" if r.category else ""
        print(f"  {r.requested_at:%Y-%m-%d %H:%M:%S} {r.request}{category} by {r.source}: {r.detail}")
    return 0


async def _recipients_requests(pool: Any, workflow_id: str, channel: str) -> list[Any]:
    """What the intent's recipient asked of us (STOP, START, unsubscribes), found by the fingerprint
    the intent row carries: the number itself is never looked up."""
    from herald.ledger.recipient_requests import requests_of

    async with pool.connection() as conn:
        row = await (await conn.execute(
            "SELECT recipient_fingerprint FROM intents WHERE workflow_id = %s", (workflow_id,)
        )).fetchone()  # fmt: skip
        if row is None or row[0] is None:
            return []
        return await requests_of(conn, [row[0]], channel)


async def _notice_status(args: argparse.Namespace, services: Services) -> int:
    """Every channel's intent under the key, side by side."""
    from herald.notice_view import render_notice

    herald = await services.herald()
    found = await herald.notice_status(args.key)
    if not any(found.values()):
        raise HeraldError(f"key: no intent on any channel for {args.key}")
    print(render_notice(args.key, {channel.value: status for channel, status in found.items()}))
    return 0


async def cmd_cancel(args: argparse.Namespace, services: Services) -> int:
    herald = await services.herald()
    answer = await herald.cancel(args.key, args.reason, args.operator, args.channel)
    print(f"{'cancelled' if answer.cancelled else 'not cancelled'} ({answer.state.value}): {answer.message}")
    return 0


async def cmd_demo(args: argparse.Namespace, services: Services) -> int:
    try:  # the local stack's tooling, in a checkout only: the product never imports it
        from devstack.config import load_stack_config
        from devstack.demo import play, refused_input_example, summary
    except ModuleNotFoundError:
        raise HeraldError("demo: plays against the local stack, from a checkout (devstack/ is not installed)") from None

    stack = load_stack_config()
    emulator_url = args.emulator_url or f"http://{stack.emulator.host}:{stack.emulator.port}"
    esp_url = f"http://{stack.esp.host}:{stack.esp.admin_port}"
    url = services.optional_ledger_url()
    if url is None:
        rows = await play(await services.herald(policy=stack.demo_policy), emulator_url, esp_url=esp_url)
    else:
        from herald import key_encryption
        from herald.artifacts import PostgresArtifactStore
        from herald.recipient_vault import RecipientVault

        async with services.ledger(url, max_size=2) as pool:
            vault = RecipientVault(pool, key_encryption.from_settings(services.settings()))
            herald = await services.herald(policy=stack.demo_policy, vault=vault)
            rows = await play(herald, emulator_url, esp_url=esp_url, artifacts=PostgresArtifactStore(pool), ledger=pool)
    print(summary(rows))
    print(f"refused input, as a caller sees it: {refused_input_example()}")
    return 0


async def cmd_report(args: argparse.Namespace, services: Services) -> int:
    from herald.ledger.report import ledger_report

    url = services.ledger_url("for the report (it is computed from the ledger)")
    outbox = services.settings().outbox.database_url
    outbox_url = database_url("HERALD_OUTBOX_DATABASE_URL", outbox.get_secret_value()) if outbox else None
    async with services.ledger(url) as pool:
        print((await ledger_report(pool)).render())
    print(await _route_backlog(services))
    if outbox_url is not None:
        from herald.outbox.relay import backlog, describe

        try:
            async with services.ledger(outbox_url, variable="HERALD_OUTBOX_DATABASE_URL") as outbox_pool:
                print(describe(await backlog(outbox_pool)))
        except ServiceUnreachable as error:  # the service database is not always reachable from here
            print(f"outbox backlog: unknown ({error})")
        except psycopg.Error as error:
            print(f"outbox backlog: unknown ({type(error).__name__}: the outbox database did not answer)")
    return 0


async def _route_backlog(services: Services) -> str:
    """The route's queue now, from the Temporal server: the report's one figure the ledger cannot have
    (a submit still queued is not in it yet). Unknown, not fatal, when the server does not answer."""
    from herald.route_backlog import route_backlog

    try:
        herald = await services.herald()
        return (await route_backlog(herald.temporal, services.settings().temporal.task_queue)).render()
    except (ServiceUnreachable, RPCError) as error:
        return f"route backlog: unknown ({error})"


# --- artifact, template ------------------------------------------------------------------------

# The field names of ArtifactRefused, as the caller of `artifact put` spells them.
_ARTIFACT_PUT_ARGUMENTS = {"content": "FILE", "media_type": "--media-type", "filename": "--filename"}


async def cmd_artifact_put(args: argparse.Namespace, services: Services) -> int:
    import mimetypes

    from herald.artifacts import MAX_ARTIFACT_BYTES, ArtifactRefused, PostgresArtifactStore, artifact_ref

    path = Path(args.file)
    content = cli_input.read_bytes(args.file, "FILE", max_bytes=MAX_ARTIFACT_BYTES)
    guessed, encoding = mimetypes.guess_type(path.name)
    # A compressed file (report.csv.gz) is guessed as what it contains; its bytes are not that type.
    if args.media_type is not None:
        media_type = args.media_type
    else:
        media_type = guessed if guessed and encoding is None else "application/octet-stream"
    filename = args.filename if args.filename is not None else path.name
    try:
        artifact_ref(content, media_type=media_type, filename=filename)
    except ArtifactRefused as refused:
        raise CliInputError(_ARTIFACT_PUT_ARGUMENTS[refused.field], refused.rule) from None
    url = services.ledger_url("to store an artifact (artifacts live in the ledger's database)")
    async with services.ledger(url) as pool:
        ref = await PostgresArtifactStore(pool).put(content, media_type=media_type, filename=filename)
    print(ref.model_dump_json())
    return 0


async def cmd_template_preview(args: argparse.Namespace, services: Services) -> int:
    """Render a version with data (an e-mail's HTML part too), and say what it costs: no service is contacted."""
    from herald.templates import TemplateError, load_template, render_message, resolve_version

    try:
        version = resolve_version(args.template_id, args.version)
        template = load_template(args.template_id, version)
        kinds = {spec.name: spec.kind for spec in template.field_specs}
        rendered = render_message(
            args.template_id, version, cli_input.render_data(args.data or [], kinds), channel=template.channel
        )
    except TemplateError as error:
        positional = {"template_id": "TEMPLATE_ID", "template_version": "VERSION"}
        raise HeraldError(
            "; ".join(f"{positional.get(field, field)}: {rule}" for field, rule in error.problems)
        ) from None
    print(f"template    {args.template_id} v{version} ({template.channel})")
    print("fields      " + ", ".join(spec.describe() for spec in template.field_specs))
    if rendered.subject is not None:
        print(f"subject     {rendered.subject}")
    if rendered.segments is not None:
        print(f"cost        {rendered.segments.describe()}; the template allows {template.segment_limit}")
    print("body:")
    print(rendered.body)
    if rendered.html_body is not None:
        # As it is sent: the render data escaped by the template engine.
        print("html part:")
        print(rendered.html_body)
    return 0


async def cmd_template_publish(args: argparse.Namespace, services: Services) -> int:
    """Publish FILE as a template version in this checkout (a published version never changes)."""
    from herald.templates import PublishRefused, publish

    text = cli_input.read_text(args.file, "FILE", max_bytes=cli_input.MAX_TEMPLATE_BYTES)
    root = Path(__file__).resolve().parents[1] / "templates"
    try:
        added = publish(args.template_id, args.version, text, root=root)
    except PublishRefused as refused:
        refusal = str(refused)
        # A refused id or version is named by its argument and never echoed (it may be a path).
        for field, positional in (("template_id:", "TEMPLATE_ID:"), ("template_version:", "VERSION:")):
            if refusal.startswith(field):
                raise HeraldError(positional + refusal[len(field) :]) from None
        raise HeraldError(f"{args.template_id} v{args.version}: {refusal}") from None
    print(f"{args.template_id} v{args.version} " + ("published" if added else "already published with this content"))
    return 0


# --- policy, consent, suppression ----------------------------------------------------------------

_POLICY_LEDGER = "(the send policy lives in the ledger's database)"


def _since(effective_from: datetime | None) -> str:
    return "the beginning" if effective_from is None else effective_from.isoformat()


async def cmd_policy_list(args: argparse.Namespace, services: Services) -> int:
    from herald.ledger.policy_store import policy_versions

    url = services.ledger_url(_POLICY_LEDGER)
    async with services.ledger(url) as pool:
        for row in await policy_versions(pool):
            print(f"v{row['version']:<4} effective from {_since(row['effective_from'])}   owner {row['owner']}   {row['note']}")
    return 0


async def cmd_policy_show(args: argparse.Namespace, services: Services) -> int:
    from herald.ledger.policy_store import policy_version
    from herald.send_policy import PolicyRules

    url = services.ledger_url(_POLICY_LEDGER)
    async with services.ledger(url) as pool:
        row = await policy_version(pool, args.version)
    if row is None:
        raise HeraldError(f"VERSION: no policy version {args.version}")
    rules = PolicyRules.model_validate(row["rules"])
    print(f"v{row['version']} effective from {_since(row['effective_from'])}, owner {row['owner']}: {row['note']}")
    print(rules.model_dump_json(indent=2))
    return 0


async def cmd_policy_publish(args: argparse.Namespace, services: Services) -> int:
    """Publish FILE (JSON rules) as the next version; validated before connecting."""
    from pydantic import ValidationError

    from herald.ledger.policy_store import publish_policy
    from herald.send_policy import PolicyRules

    raw = cli_input.read_json_object(args.file, "FILE")
    try:
        rules = PolicyRules.model_validate(raw)
    except ValidationError as error:
        # Field paths are shown only where they are identifiers: a key of the file may be anything.
        problems = [describe_validation_error(item) for item in error.errors(include_input=False, include_url=False)]
        raise CliInputError("FILE", "; ".join(f"{field}: {rule}" for field, rule in problems)) from None
    effective = args.effective_from or datetime.now(UTC)
    url = services.ledger_url(_POLICY_LEDGER)
    async with services.ledger(url) as pool:
        version = await publish_policy(pool, rules, effective_from=effective, owner=args.owner, note=args.note)
    print(f"published policy v{version}, effective from {effective.isoformat()}")
    return 0


async def cmd_consent_grant(args: argparse.Namespace, services: Services) -> int:
    from herald.ledger.policy_store import grant_consent
    from herald.send_policy import Category

    recipient = cli_input.recipient(args.recipient, "RECIPIENT")
    fingerprint = services.keyring().recipient(recipient)
    url = services.ledger_url(_POLICY_LEDGER)
    async with services.ledger(url) as pool:
        await grant_consent(
            pool, fingerprint=fingerprint, category=Category(args.category), source=args.source,
            granted_at=datetime.now(UTC),
        )  # fmt: skip
    print(f"consent recorded for {args.category} (recipient fingerprint {fingerprint[:16]})")
    return 0


async def cmd_erase(args: argparse.Namespace, services: Services) -> int:
    """Erase RECIPIENT from every place Herald wrote them: the outbox, Temporal, the ledger.

    The order matters. The outbox goes first, so no relay starts another intent to them. The
    ledger's intents are looked up before the ledger forgets the recipient. Temporal comes before
    the ledger: a running intent is cancelled and given time to close, and a closing intent still
    writes its last rows to the ledger and still reads the recipient back, so the ledger's erasure
    comes after it has closed rather than under it. An intent still running at the bound (it has
    a message at the provider and tracks it) meets the ledger's erasure while running; it is named,
    the command exits 3, and erasing again once it has closed deletes it (the ledger still finds it
    by fingerprint).
    """
    from contextlib import AsyncExitStack

    from herald.ledger.privacy import erase_recipient
    from herald.ledger.recipient_intents import intents_addressed_to
    from herald.outbox.erasure import erase_outbox_notices
    from herald.temporal_erasure import erase_executions

    recipient = cli_input.recipient(args.recipient, "RECIPIENT")
    url = services.ledger_url("(erasure runs in the ledger's database)")
    settings = services.settings()
    outbox = settings.outbox.database_url
    outbox_url = database_url("HERALD_OUTBOX_DATABASE_URL", outbox.get_secret_value()) if outbox else None
    # Every place is reached before anything is erased: one that does not answer stops the command
    # with nothing changed, not with an erasure done in part.
    herald = await services.herald()
    async with AsyncExitStack() as opened:
        pool = await opened.enter_async_context(services.ledger(url))
        outbox_pool = None
        if outbox_url is not None:
            outbox_pool = await opened.enter_async_context(
                services.ledger(outbox_url, variable="HERALD_OUTBOX_DATABASE_URL")
            )
        workflow_ids: set[str] = set()
        if outbox_pool is None:
            print("outbox: not configured (HERALD_OUTBOX_DATABASE_URL unset)")
        else:
            notices = await erase_outbox_notices(outbox_pool, recipient)
            workflow_ids.update(notices.workflow_ids)
            print(
                f"outbox: {notices.rows_erased} notice(s) addressed to them replaced by the erased marker "
                f"({notices.never_relayed} not yet relayed: refused, never to be relayed)"
            )
            # A relay may be starting one of those rows from a copy read before: its intent exists
            # once the relay's claim ends, and Temporal is searched after that.
            await asyncio.sleep(min(notices.claim_seconds_left, settings.outbox.lease_seconds))
        workflow_ids.update(await intents_addressed_to(pool, recipient))
        executions = await erase_executions(
            herald.temporal, sorted(workflow_ids), operator=args.operator, reason=args.reason,
            close_within=timedelta(seconds=args.close_within),
        )  # fmt: skip
        print(_describe_executions(executions, args.close_within))
        erasure = await erase_recipient(pool, recipient=recipient, operator=args.operator, reason=args.reason)
    print(
        f"ledger: erased {erasure.rows_affected} intent(s) of recipient fingerprint "
        f"{erasure.recipient_fingerprint[:16]}: number or address, render data, bodies and subjects; states, "
        f"times and reasons kept; any opt-out kept by fingerprint; {erasure.artifacts_erased} attachment(s) "
        f"erased, {erasure.keys_destroyed} data key(s) destroyed (ledger_purges id {erasure.purge_id})"
    )
    return 0 if executions.complete else EXIT_ERASE_INCOMPLETE


def _describe_executions(done: ExecutionErasure, close_within: int) -> str:
    """The Temporal line of `erase`; workflow ids carry no personal data, so the intents left
    running are named."""
    intents = len({run.workflow_id for run in done.deleted})
    line = f"temporal: {len(done.deleted)} run(s) of {intents} intent(s) deleted, verified gone"
    if done.cancel_requested:
        line += f"; {len(done.cancel_requested)} running intent(s) asked to cancel first"
    if done.still_running:
        line += (
            f"; STILL RUNNING after {close_within}s, not deleted and not terminated: "
            f"{', '.join(done.still_running)} (run erase again once they close)"
        )
    if done.unverified:
        line += f"; {len(done.unverified)} run(s) deleted but still answering (run erase again)"
    if done.archival_enabled:
        line += "; this namespace archives closed executions: archived copies are out of reach"
    return line


async def cmd_suppression_lift(args: argparse.Namespace, services: Services) -> int:
    from herald.ledger.policy_store import lift_suppression

    recipient = cli_input.recipient(args.recipient, "RECIPIENT", args.channel)
    fingerprint = services.keyring().recipient(recipient)
    url = services.ledger_url(_POLICY_LEDGER)
    async with services.ledger(url) as pool:
        at = await lift_suppression(
            pool, fingerprint=fingerprint, channel=args.channel, operator=args.operator, reason=args.reason
        )
    print(f"suppression lifted at {at.isoformat()} (evidence before it no longer suppresses)")
    return 0


# What suppression_evidence and erased_suppressions hold for a recipient, with the predicates the
# policy gate reads them by (herald.ledger.policy_store._STANDING_SQL), and the operators' lifts.
_EVIDENCE_SQL = """
SELECT 'provider report' AS source, cause, detail, seen_at FROM suppression_evidence
 WHERE (recipient_fingerprint = ANY(%(fps)s) OR (recipient_fingerprint IS NULL AND recipient = %(recipient)s))
   AND recipient <> '(erased)' AND channel = %(channel)s
UNION ALL
SELECT 'provider report (recipient erased)', cause, detail, seen_at FROM erased_suppressions
 WHERE recipient_fingerprint = ANY(%(fps)s) AND channel = %(channel)s
ORDER BY seen_at DESC
"""
_LIFTS_SQL = """
SELECT lifted_at, operator, reason FROM suppression_lifts
 WHERE recipient_fingerprint = ANY(%(fps)s) AND channel = %(channel)s ORDER BY lifted_at DESC
"""


async def cmd_suppression_list(args: argparse.Namespace, services: Services) -> int:
    """What RECIPIENT asked of us and what the providers reported, and whether each suppresses now."""
    from herald import fingerprints
    from herald.ledger.policy_store import policy_in_force, standing
    from herald.ledger.recipient_requests import requests_of
    from herald.send_policy import UNSUBSCRIBE, Category

    recipient = cli_input.recipient(args.recipient, "RECIPIENT", args.channel)
    channel = args.channel or ("sms" if recipient.startswith("+") else "email")
    keyring = services.keyring()
    fingerprint = keyring.recipient(recipient)
    fps = keyring.recipient_candidates(recipient)
    now = datetime.now(UTC)
    url = services.ledger_url(_POLICY_LEDGER)
    async with services.ledger(url) as pool, pool.connection() as conn:
        version, rules = await policy_in_force(conn, now)
        asked = await requests_of(conn, fps, channel)
        params = {"fps": fps, "recipient": recipient, "channel": channel}
        evidence = await (await conn.execute(_EVIDENCE_SQL, params)).fetchall()
        lifts = await (await conn.execute(_LIFTS_SQL, params)).fetchall()
        # The gate's own reading, category by category: what an attempt prepared now would meet.
        standings = {
            category: await standing(
                conn, at=now, recipient=recipient, channel=channel, category=category, workflow_id=""
            )
            for category in Category
        }
    lifted_at = max([at for at, _, _ in lifts] + [r.requested_at for r in asked if r.request == "opt_in"], default=None)

    def verdict(cause: str, seen_at: datetime, category: str | None = None) -> str:
        if lifted_at is not None and seen_at <= lifted_at:
            return f"lifted at {lifted_at.isoformat()}"
        stopped = [c.value for c in Category if cause in rules.suppressing_causes(c)]
        if cause == UNSUBSCRIBE:
            stopped = [c for c in stopped if c == category]
        return f"suppresses {', '.join(stopped)}" if stopped else f"suppresses nothing under policy v{version}"

    print(f"recipient fingerprint {fingerprints.short(fingerprint)}, channel {channel}, policy v{version} in force")
    suppressed = [
        (category.value, next(f"{cause} ({detail}) at {seen.isoformat()}" for cause, detail, seen in found.suppressions
                              if cause in rules.suppressing_causes(category)))
        for category, found in standings.items()
        if any(cause in rules.suppressing_causes(category) for cause, _, _ in found.suppressions)
    ]  # fmt: skip
    if suppressed:
        for category, because in suppressed:
            print(f"now: {category} suppressed by {because}")
    else:
        print("now: not suppressed")
    print("requests (what the recipient asked):" if asked else "requests: none recorded")
    for r in asked:
        if r.request in ("opt_out", "unsubscribe"):
            effect = verdict(r.request, r.requested_at, r.category)
        elif r.request == "opt_in":
            effect = "lifts what came before it"
        else:
            effect = "recorded only"
        scope = f" ({r.category})" if r.category else ""
        print(f"  {r.requested_at.isoformat()}  {r.request}{scope}  {r.source}: {r.detail}  -> {effect}")
    print("evidence (what providers reported):" if evidence else "evidence: none recorded")
    for source, cause, detail, seen_at in evidence:
        print(f"  {seen_at.isoformat()}  {cause}  {source}: {detail}  -> {verdict(cause, seen_at)}")
    if lifts:
        print("lifts (operators):")
    for at, operator, reason in lifts:
        print(f"  {at.isoformat()}  by {operator}: {reason}")
    return 0


# --- the parser ----------------------------------------------------------------------------------

EXAMPLES = {
    "send": [
        (
            "send --key order_receipt:pay_157 --to +15551230001 --template order_receipt --version 1 \\\n"
            "      --data order_ref=ord_1 --data amount=42.50 --data currency=EUR --data merchant=Shop"
        ),
        (
            "send --key seller_new_order:ord_9 --to +15551230002 --template seller_new_order --version latest \\\n"
            "      --data order_ref=ord_9 --data 'order_total=EUR 18.00' --data item_count=2 --wait"
        ),
        'send --file intent.json      # one request; {"business_key": ..., "channels": [...]} for a notice',
        (
            "send --key order_receipt:pay_158 --to +15551230001 --template order_receipt --version 1 \\\n"
            "      --data order_ref=ord_2 --data amount=9.00 --data currency=EUR --data merchant=Shop \\\n"
            "      --tenant acme --priority 4    # for tenant acme; may wait behind receipts at priority 2"
        ),
    ],
    "status": [
        "status seller_new_order:ord_9                 # every channel side by side",
        "status order_receipt:pay_157 --channel sms    # one intent, with the ledger's rows",
    ],
    "cancel": ['cancel order_receipt:pay_157 --reason "seat filled" --operator alice'],
    "report": ["report"],
    "demo": ["demo", "demo --emulator-url http://127.0.0.1:8234"],
    "artifact put": [
        "artifact put report.pdf",
        "artifact put export.bin --media-type application/pdf --filename report-2026-01.pdf",
    ],
    "template preview": [
        "template preview seller_new_order latest --data order_ref=A-1 --data 'order_total=EUR 18.00' --data item_count=2"
    ],
    "template publish": ["template publish order_receipt 2 order_receipt_v2.txt"],
    "policy list": ["policy list"],
    "policy show": ["policy show 2"],
    "policy publish": [
        'policy publish rules.json --owner ops-team --note "quiet hours"',
        "policy publish rules.json --owner ops-team --effective-from 2026-12-02T08:00:00+00:00",
    ],
    "consent grant": ["consent grant +15551230001 marketing --source signup-form"],
    "suppression lift": ['suppression lift +15551230001 --channel sms --operator alice --reason "resubscribed"'],
    "suppression list": [
        "suppression list +15551230001                # STOP/START/HELP replies, 21610s, lifts; what suppresses now",
        "suppression list alice@example.com --channel email",
    ],
    "erase": ['erase +15551230001 --operator dpo --reason "erasure request 2026-118"'],
}


def _examples(*commands: str) -> str:
    lines = [f"  {PROG} {example}" for command in commands for example in EXAMPLES[command]]
    return "examples:\n" + "\n".join(lines)


def _command(group: Any, name: str, summary: str, *examples: str) -> argparse.ArgumentParser:
    """A subcommand with its summary and, under `--help`, the examples of `examples` (EXAMPLES keys)."""
    return group.add_parser(  # type: ignore[no-any-return]
        name, help=summary, description=summary[0].upper() + summary[1:] + ".", epilog=_examples(*examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog=PROG,
        description="Send, inspect and cancel Herald intents; keep templates, the send policy, consent and artifacts.",
        epilog=_examples(*EXAMPLES) + "\n\n"
        "exit codes: 0 done, 2 bad input or settings (one line naming the option and the rule),\n"
        "1 a service failed or could not be reached, 3 erase done in part (run it again later),\n"
        "130 interrupted. Nothing is connected to before every input has been checked. Settings:\n"
        "HERALD_* variables and DATABASE_URL, else the running local stack's .state/stack.env.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    key_help = "the business key, 'event_type:business_id', e.g. order_receipt:pay_157"

    send = _command(commands, "send", "create one intent, or attach to the one its key names", "send")
    send.add_argument(
        "--file",
        help='JSON file with the whole request; with "channels": [...], a notice on several channels (replaces every option below but --wait)',
    )
    send.add_argument("--key", type=cli_input.business_key, help=key_help + " (the idempotency key)")
    send.add_argument("--channel", choices=["sms", "email"], help="the channel (default: sms)")
    send.add_argument("--to", help="the recipient: an E.164 number for sms, an e-mail address for email")
    send.add_argument("--template", help="the template id, e.g. order_receipt")
    send.add_argument("--version", type=cli_input.version_or_latest, help="a published version number or 'latest'")
    send.add_argument("--data", action="append", metavar="NAME=VALUE",
                      help="one render field, repeated per field; an int field takes ASCII digits 0-9")  # fmt: skip
    send.add_argument("--tenant", metavar="ID",
                      help="who the notice is for, the fairness key on a backlogged route (default: shared)")  # fmt: skip
    send.add_argument("--priority", metavar="N",
                      help="a priority key 1 (first) to 5 (last), lower than the category's to let it wait "
                           "(default: the category's; a higher one is recorded as not granted)")  # fmt: skip
    send.add_argument("--wait", action="store_true", help="wait for the final state and print it")
    send.set_defaults(run=cmd_send)

    status = _command(
        commands,
        "status",
        "a notice's channels side by side; with --channel, one intent with its ledger rows",
        "status",
    )
    status.add_argument("key", type=cli_input.business_key, help=key_help)
    status.add_argument("--channel", choices=["sms", "email"], help="one channel's intent in detail")
    status.set_defaults(run=cmd_status)

    cancel = _command(commands, "cancel", "close an intent's future work", "cancel")
    cancel.add_argument("key", type=cli_input.business_key, help=key_help)
    cancel.add_argument(
        "--channel", choices=["sms", "email"], default="sms", help="the intent's channel (default: sms)"
    )
    cancel.add_argument(
        "--reason", required=True, type=cli_input.bounded_text(500), help="why, for the record (1-500 characters)"
    )
    cancel.add_argument(
        "--operator", required=True, type=cli_input.bounded_text(100), help="who cancels (1-100 characters)"
    )
    cancel.set_defaults(run=cmd_cancel)

    report = _command(commands, "report", "the numbers Herald keeps about itself, from the ledger", "report")
    report.set_defaults(run=cmd_report)

    demo = _command(commands, "demo", "play the demo scenario against a running local stack", "demo")
    demo.add_argument(
        "--emulator-url", type=cli_input.http_url, help="the emulator's base URL (default: from temporal-dev.yaml)"
    )
    demo.set_defaults(run=cmd_demo)

    artifact = _command(commands, "artifact", "immutable attachments, stored by content", "artifact put")
    artifact_commands = artifact.add_subparsers(dest="artifact_command", required=True, metavar="ACTION")
    artifact_put = _command(artifact_commands, "put", "store a file; prints its ref as JSON", "artifact put")
    artifact_put.add_argument("file", metavar="FILE", help="the file to store")
    artifact_put.add_argument("--media-type", help="e.g. application/pdf (default: guessed from FILE's name)")
    artifact_put.add_argument("--filename", help="the name recipients see (default: FILE's name)")
    artifact_put.set_defaults(run=cmd_artifact_put)

    policy = _command(
        commands,
        "policy",
        "the send policy: list, show, publish a new version",
        "policy list",
        "policy show",
        "policy publish",
    )
    policy_commands = policy.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    _command(policy_commands, "list", "every published version", "policy list").set_defaults(run=cmd_policy_list)
    show = _command(policy_commands, "show", "one version's rules", "policy show")
    show.add_argument("version", metavar="VERSION", type=cli_input.version_number, help="the version number")
    show.set_defaults(run=cmd_policy_show)
    publish_policy_cmd = _command(
        policy_commands, "publish", "publish FILE (JSON rules) as the next version", "policy publish"
    )
    publish_policy_cmd.add_argument(
        "file", metavar="FILE", help="a JSON file of rules (herald.send_policy.PolicyRules)"
    )
    publish_policy_cmd.add_argument(
        "--owner", required=True, type=cli_input.bounded_text(100), help="who owns this version (a team or a person)"
    )
    publish_policy_cmd.add_argument("--note", default="", help="why it changed")
    publish_policy_cmd.add_argument(
        "--effective-from", type=cli_input.time_with_zone, help="ISO 8601 with a zone (default: now)"
    )
    publish_policy_cmd.set_defaults(run=cmd_policy_publish)

    consent = _command(commands, "consent", "record consent evidence for a recipient and category", "consent grant")
    consent_commands = consent.add_subparsers(dest="consent_command", required=True, metavar="ACTION")
    grant = _command(consent_commands, "grant", "record that RECIPIENT agreed to CATEGORY messages", "consent grant")
    grant.add_argument(
        "recipient", metavar="RECIPIENT", help="an E.164 number or an e-mail address (stored only as its SHA-256)"
    )
    grant.add_argument(
        "category",
        metavar="CATEGORY",
        choices=["transactional", "account", "marketing"],
        help="transactional, account or marketing",
    )
    grant.add_argument(
        "--source",
        required=True,
        type=cli_input.bounded_text(200),
        help="where the evidence is (a form, a checkbox id)",
    )
    grant.set_defaults(run=cmd_consent_grant)

    suppression = _command(
        commands,
        "suppression",
        "a recipient's suppression: what it rests on, and lifting it with a recorded reason",
        "suppression list",
        "suppression lift",
    )
    suppression_commands = suppression.add_subparsers(dest="suppression_command", required=True, metavar="ACTION")
    lift = _command(suppression_commands, "lift", "let RECIPIENT be sent to again on one channel", "suppression lift")
    lift.add_argument("recipient", metavar="RECIPIENT", help="the E.164 number (sms) or e-mail address (email)")
    lift.add_argument(
        "--channel", choices=["sms", "email"], required=True, help="the channel whose suppression is lifted"
    )
    lift.add_argument(
        "--operator", required=True, type=cli_input.bounded_text(100), help="who lifts it (1-100 characters)"
    )
    lift.add_argument(
        "--reason", required=True, type=cli_input.bounded_text(500), help="why, for the record (1-500 characters)"
    )
    lift.set_defaults(run=cmd_suppression_lift)
    listing = _command(
        suppression_commands,
        "list",
        "RECIPIENT's requests (STOP, START, HELP, unsubscribes) and providers' evidence, and what suppresses now",
        "suppression list",
    )
    listing.add_argument("recipient", metavar="RECIPIENT", help="the E.164 number (sms) or e-mail address (email)")
    listing.add_argument(
        "--channel", choices=["sms", "email"], help="the channel (default: sms for a number, email for an address)"
    )
    listing.set_defaults(run=cmd_suppression_list)

    erase = _command(
        commands,
        "erase",
        "erase a recipient's personal data from the outbox, Temporal and the ledger; exit 3 if an intent "
        "was still running (run it again later)",
        "erase",
    )
    erase.add_argument("recipient", metavar="RECIPIENT", help="the E.164 number or e-mail address whose data is erased")
    erase.add_argument(
        "--operator", required=True, type=cli_input.bounded_text(100), help="who erases (1-100 characters)"
    )
    erase.add_argument(
        "--reason", required=True, type=cli_input.bounded_text(500), help="the request it answers (1-500 characters)"
    )
    erase.add_argument(
        "--close-within", type=cli_input.whole_seconds(3600), default=30, metavar="SECONDS",
        help="how long a running intent, asked to cancel, is given to close before it is reported (default: 30)",
    )  # fmt: skip
    erase.set_defaults(run=cmd_erase)

    template = _command(
        commands,
        "template",
        "versioned templates: preview a rendering, publish a version",
        "template preview",
        "template publish",
    )
    template_commands = template.add_subparsers(dest="template_command", required=True, metavar="ACTION")
    preview = _command(
        template_commands, "preview", "render with data; print subject, body, encoding, segments", "template preview"
    )
    preview.add_argument("template_id", metavar="TEMPLATE_ID", help="e.g. order_receipt")
    preview.add_argument(
        "version", metavar="VERSION", type=cli_input.version_or_latest, help="a version number or 'latest'"
    )
    preview.add_argument("--data", action="append", metavar="NAME=VALUE",
                         help="one render field, repeated per field; an int field takes ASCII digits 0-9")  # fmt: skip
    preview.set_defaults(run=cmd_template_preview)
    publish_cmd = _command(
        template_commands,
        "publish",
        "add FILE as a new version (refused if the version exists with other content)",
        "template publish",
    )
    publish_cmd.add_argument("template_id", metavar="TEMPLATE_ID", help="e.g. order_receipt")
    publish_cmd.add_argument(
        "version", metavar="VERSION", type=cli_input.version_number, help="the new version's number"
    )
    publish_cmd.add_argument("file", metavar="FILE", help="the template text (UTF-8)")
    publish_cmd.set_defaults(run=cmd_template_publish)
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


# --- running a command -----------------------------------------------------------------------------


def run(args: argparse.Namespace, services: Services) -> int:
    """Run the parsed command; every failure becomes one line on stderr and an exit code."""
    try:
        return asyncio.run(args.run(args, services))
    except (HeraldError, InvalidSetting) as error:
        # A caller's mistake: the field (or variable) and the rule, never the value, no traceback.
        return _fail(2, str(error))
    except ServiceUnreachable as error:
        return _fail(1, str(error))
    except RPCError as error:
        return _fail(
            1,
            f"Temporal refused the request ({error.status.name if error.status else 'unknown status'}): {error.message}",
        )
    except TemporalError as error:  # e.g. --wait on an intent whose workflow failed
        return _fail(1, f"Temporal reported {type(error).__name__}")
    except psycopg.OperationalError as error:
        return _fail(1, f"lost the database connection ({type(error).__name__})")
    except psycopg.Error as error:  # its text may quote row values: the class and SQLSTATE only
        sqlstate = f", SQLSTATE {error.sqlstate}" if error.sqlstate else ""
        return _fail(1, f"the database command failed ({type(error).__name__}{sqlstate})")
    except httpx.TransportError as error:  # the demo's emulators
        return _fail(1, f"a service could not be reached ({type(error).__name__})")
    except OSError as error:
        return _fail(
            1, f"a service could not be reached ({type(error).__name__}: {error.strerror or 'no reason given'})"
        )
    except KeyboardInterrupt:
        return _fail(130, "interrupted")
    except Exception as error:  # noqa: BLE001 (a bug: say where it happened, not what it held, which may be personal data)
        frame = traceback.extract_tb(error.__traceback__)[-1]
        return _fail(
            1,
            f"internal error ({type(error).__name__} at {Path(frame.filename).name}:{frame.lineno}); please report it",
        )


def _fail(code: int, message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # Failures are reported in one line; the pool's own retry warnings would add lines to stderr.
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    opened = services()
    try:
        return run(args, opened)
    finally:
        opened.close()


if __name__ == "__main__":
    sys.exit(main())
