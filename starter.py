"""Herald's command line for services and operators.

    python starter.py send --key order_receipt:pay_157 --to +15551230001 --template order_receipt \\
        --version 1 --data order_ref=ord_1 --data amount=42.50 --data currency=EUR --data merchant=Shop
    python starter.py send --file intent.json
    python starter.py status order_receipt:pay_157
    python starter.py cancel order_receipt:pay_157 --reason "seat filled" --operator alice
    python starter.py send --file notice.json     # {"business_key": ..., "channels": [{...sms}, {...email}]}
    python starter.py status seller_new_order:ord_1 # every channel side by side
    python starter.py report
    python starter.py demo
    python starter.py template preview order_receipt latest --data order_ref=A-1 --data amount=12.50 ...
    python starter.py template publish order_receipt 2 order_receipt_v2.txt
    python starter.py policy list | show 2 | publish rules.json --owner ops-team --note "quiet hours"
    python starter.py consent grant +15551230001 marketing --source signup-form
    python starter.py suppression lift +15551230001 --channel sms --operator alice --reason "resubscribed"
    python starter.py artifact put report.pdf [--media-type application/pdf] [--filename report.pdf]

Connection settings come from HERALD_* variables; when they are unset and the
local stack is running, from the `.state/stack.env` file it writes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from herald.client import HeraldClient
from herald.errors import HeraldError
from herald.settings import InvalidSetting, Settings, load_settings
from herald.temporal_client import connect


def _settings() -> Settings:
    from devstack.config import load_stack_config

    env_file = load_stack_config().state_path / "stack.env"
    merged: dict[str, str] = {}
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            name, _, value = line.partition("=")
            if name:
                merged[name] = value
    merged.update(os.environ)
    return load_settings(merged)


async def _client(settings: Settings) -> HeraldClient:
    return HeraldClient(await connect(settings.temporal), settings.temporal.task_queue)


def _request_from_args(args: argparse.Namespace) -> dict[str, Any]:
    if args.file:
        return json.loads(Path(args.file).read_text(encoding="utf-8"))
    data: dict[str, str | int] = {}
    for item in args.data or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise HeraldError(f"--data {name!r}: must be NAME=VALUE")
        data[name] = int(value) if value.isdigit() and not value.startswith("0") else value
    return {
        "business_key": args.key,
        "channel": args.channel,
        "recipient": args.to,
        "template_id": args.template,
        "template_version": args.version,
        "render_data": data,
    }


async def cmd_send(args: argparse.Namespace) -> int:
    raw = _request_from_args(args)
    if "channels" in raw:
        return await _send_notice(raw, args)
    herald = await _client(_settings())
    receipt = await herald.send(raw)
    print(f"intent {receipt.workflow_id} started or attached (content sha256 {receipt.content_sha256[:16]}...)")
    if args.wait:
        final = await herald.wait(args.key, args.channel)
        print(f"final state: {final.state.value}")
    return 0


async def _send_notice(raw: dict[str, Any], args: argparse.Namespace) -> int:
    """A file naming several channels: one intent per channel, all validated before any starts."""
    from herald.notice import parse_notice

    notice = parse_notice(raw)  # before connecting: bad input is reported as bad input
    herald = await _client(_settings())
    receipt = await herald.send_notice(notice)
    for channel, sent in receipt.intents.items():
        print(f"intent {sent.workflow_id} ({channel.value}) started or attached (content sha256 {sent.content_sha256[:16]}...)")
    if args.wait:
        for channel in receipt.intents:
            final = await herald.wait(notice.business_key, channel)
            print(f"final state ({channel.value}): {final.state.value}")
    return 0


async def cmd_status(args: argparse.Namespace) -> int:
    if args.channel is None:
        return await _notice_status(args)
    from herald.intent import workflow_id_for
    from herald.ledger.store import intent_history, open_pool

    settings = _settings()
    herald = await _client(settings)
    live = await herald.status(args.key, args.channel)
    print(f"intent      {live.workflow_id}")
    print(f"template    {live.template_id} v{live.template_version}   content sha256 {live.content_sha256}")
    print(f"state       {live.state.value}" + (f"   closed by {live.closed_by}" if live.closed_by else ""))
    for attempt in live.attempts:
        print(
            f"attempt {attempt.number}   ref {attempt.attempt_ref}   "
            f"submit {attempt.submit_result.value if attempt.submit_result else '-'}   "
            f"provider {attempt.provider_id or '-'} {attempt.provider_status.value if attempt.provider_status else ''}"
            f"   lookups {attempt.lookups}"
            + (f"   retry after {attempt.retry_delay_seconds:.1f}s" if attempt.retry_delay_seconds else "")
            + ("   SEEN AFTER PRESUMED NOT ACCEPTED" if attempt.seen_after_presumed_absent else "")
        )
    if settings.database_url is None:
        print("(set DATABASE_URL to include the ledger's transitions and observations)")
        return 0
    async with open_pool(settings.database_url.get_secret_value(), max_size=1) as pool:
        history = await intent_history(pool, workflow_id_for(args.key, args.channel))
    if history is None:
        print("ledger: no row yet")
        return 0
    print("transitions (ledger):")
    for t in history["transitions"]:
        print(f"  {t['seq']:>3} {t['at']:%H:%M:%S.%f} {t['from_state']:>17} -> {t['to_state']:<17} [{t['source']}] {t['reason']}")
    print("observations (ledger):")
    for o in history["observations"]:
        verdict = "applied" if o["applied"] else "ignored"
        print(
            f"  {o['seq']:>3} attempt {o['attempt_number'] or '-'} [{o['source']}] {o['kind']} "
            f"{o['provider_status'] or ''} {verdict}: {o['reason']}"
        )
    return 0


async def _notice_status(args: argparse.Namespace) -> int:
    """Every channel's intent under the key, side by side."""
    from herald.notice_view import render_notice

    herald = await _client(_settings())
    found = await herald.notice_status(args.key)
    if not any(found.values()):
        raise HeraldError(f"key: no intent on any channel for {args.key}")
    print(render_notice(args.key, {channel.value: status for channel, status in found.items()}))
    return 0


async def cmd_cancel(args: argparse.Namespace) -> int:
    herald = await _client(_settings())
    answer = await herald.cancel(args.key, args.reason, args.operator, args.channel)
    print(f"{'cancelled' if answer.cancelled else 'not cancelled'} ({answer.state.value}): {answer.message}")
    return 0


async def cmd_demo(args: argparse.Namespace) -> int:
    from devstack.demo import play, refused_input_example, summary
    from devstack.config import load_stack_config

    stack = load_stack_config()
    settings = _settings()
    herald = HeraldClient(await connect(settings.temporal), settings.temporal.task_queue, policy=stack.demo_policy)
    emulator_url = args.emulator_url or f"http://{stack.emulator.host}:{stack.emulator.port}"
    esp_url = f"http://{stack.esp.host}:{stack.esp.admin_port}"
    if settings.database_url is None:
        rows = await play(herald, emulator_url, esp_url=esp_url)
    else:
        from herald.artifacts import PostgresArtifactStore
        from herald.ledger.store import open_pool

        async with open_pool(settings.database_url.get_secret_value(), max_size=2) as pool:
            rows = await play(herald, emulator_url, esp_url=esp_url, artifacts=PostgresArtifactStore(pool), ledger=pool)
    print(summary(rows))
    print(f"refused input, as a caller sees it: {refused_input_example()}")
    return 0


async def cmd_report(args: argparse.Namespace) -> int:
    from herald.ledger.report import ledger_report
    from herald.ledger.store import open_pool

    settings = _settings()
    if settings.database_url is None:
        raise HeraldError("DATABASE_URL: required for the report (it is computed from the ledger)")
    async with open_pool(settings.database_url.get_secret_value(), max_size=1) as pool:
        print((await ledger_report(pool)).render())
    if settings.outbox_database_url is not None:
        import psycopg

        from herald.outbox.relay import backlog, describe

        try:
            async with open_pool(settings.outbox_database_url.get_secret_value(), max_size=1, timeout=3) as outbox_pool:
                print(describe(await backlog(outbox_pool)))
        except (OSError, RuntimeError, psycopg.Error) as error:  # the service database is not reachable from here
            print(f"outbox backlog: unknown ({type(error).__name__}: the outbox database did not answer)")
    return 0


# The field names of ArtifactRefused, as the caller of `artifact put` spells them.
_ARTIFACT_PUT_ARGUMENTS = {"content": "FILE", "media_type": "--media-type", "filename": "--filename"}


async def cmd_artifact_put(args: argparse.Namespace) -> int:
    import mimetypes

    import psycopg

    from herald.artifacts import MAX_ARTIFACT_BYTES, ArtifactRefused, PostgresArtifactStore, artifact_ref
    from herald.ledger.store import open_pool

    # Checked before connecting, so a mistyped FILE is not reported as a database problem.
    path = Path(args.file)
    try:
        with path.open("rb") as handle:  # noqa: ASYNC230 (nothing else runs on this loop yet)
            # One byte past the limit is enough to refuse: a huge file is never read whole.
            content = handle.read(MAX_ARTIFACT_BYTES + 1)
    except FileNotFoundError:
        raise HeraldError("FILE: no such file") from None
    except IsADirectoryError:
        raise HeraldError("FILE: is a directory, not a file") from None
    except OSError as error:  # e.g. permission denied; strerror never includes the path
        raise HeraldError(f"FILE: cannot be read ({error.strerror or type(error).__name__})") from None
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
        raise HeraldError(f"{_ARTIFACT_PUT_ARGUMENTS[refused.field]}: {refused.rule}") from None

    settings = _settings()
    if settings.database_url is None:
        raise HeraldError("DATABASE_URL: required to store an artifact (artifacts live in the ledger's database)")
    async with open_pool(settings.database_url.get_secret_value(), max_size=1) as pool:
        try:
            ref = await PostgresArtifactStore(pool).put(content, media_type=media_type, filename=filename)
        except psycopg.OperationalError as error:
            # As an OSError, main() reports it in one line as a service it cannot reach.
            raise ConnectionError(f"the database at DATABASE_URL did not answer ({type(error).__name__})") from None
    print(ref.model_dump_json())
    return 0


async def cmd_template_preview(args: argparse.Namespace) -> int:
    """Render a version with data, and say what it costs: no service is contacted."""
    from herald.templates import TemplateError, load_template, render_message, resolve_version

    data = _render_data(args.data)
    try:
        version = resolve_version(args.template_id, args.version)
        template = load_template(args.template_id, version)
        rendered = render_message(args.template_id, version, data, channel=template.channel)
    except TemplateError as error:
        raise HeraldError("; ".join(f"{field}: {rule}" for field, rule in error.problems)) from None
    print(f"template    {args.template_id} v{version} ({template.channel})")
    print("fields      " + ", ".join(spec.describe() for spec in template.field_specs))
    if rendered.subject is not None:
        print(f"subject     {rendered.subject}")
    if rendered.segments is not None:
        print(f"cost        {rendered.segments.describe()}; the template allows {template.segment_limit}")
    print("body:")
    print(rendered.body)
    return 0


async def cmd_template_publish(args: argparse.Namespace) -> int:
    """Publish FILE as a template version in this checkout (a published version never changes)."""
    from herald.templates import PublishRefused, publish

    try:
        text = Path(args.file).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HeraldError("FILE: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise HeraldError(f"FILE: cannot be read as UTF-8 text ({type(error).__name__})") from None
    root = Path(__file__).resolve().parent / "herald" / "templates"
    try:
        added = publish(args.template_id, args.version, text, root=root)
    except PublishRefused as refused:
        raise HeraldError(f"{args.template_id} v{args.version}: {refused}") from None
    print(f"{args.template_id} v{args.version} " + ("published" if added else "already published with this content"))
    return 0


async def _ledger_pool():  # type: ignore[no-untyped-def]
    from herald.ledger.store import open_pool

    settings = _settings()
    if settings.database_url is None:
        raise HeraldError("DATABASE_URL: required (the send policy lives in the ledger's database)")
    return open_pool(settings.database_url.get_secret_value(), max_size=1)


async def cmd_policy_list(args: argparse.Namespace) -> int:
    from herald.ledger.policy_store import policy_versions

    async with await _ledger_pool() as pool:
        for row in await policy_versions(pool):
            print(f"v{row['version']:<4} effective from {row['effective_from']}   owner {row['owner']}   {row['note']}")
    return 0


async def cmd_policy_show(args: argparse.Namespace) -> int:
    from herald.ledger.policy_store import policy_version
    from herald.send_policy import PolicyRules

    async with await _ledger_pool() as pool:
        row = await policy_version(pool, args.version)
    if row is None:
        raise HeraldError(f"version: no policy version {args.version}")
    rules = PolicyRules.model_validate(row["rules"])
    print(f"v{row['version']} effective from {row['effective_from']}, owner {row['owner']}: {row['note']}")
    print(rules.model_dump_json(indent=2))
    return 0


async def cmd_policy_publish(args: argparse.Namespace) -> int:
    """Publish FILE (JSON rules) as the next version; validated before connecting."""
    from datetime import UTC, datetime

    from pydantic import ValidationError

    from herald.ledger.policy_store import publish_policy
    from herald.send_policy import PolicyRules

    try:
        raw = json.loads(Path(args.file).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HeraldError("FILE: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HeraldError(f"FILE: not readable JSON ({type(error).__name__})") from None
    try:
        rules = PolicyRules.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(
            ".".join(str(p) for p in item["loc"]) + f": {item['msg']}" for item in error.errors(include_input=False)
        )
        raise HeraldError(f"FILE: {problems}") from None
    try:
        effective = datetime.fromisoformat(args.effective_from) if args.effective_from else datetime.now(UTC)
    except ValueError:
        raise HeraldError("--effective-from: must be an ISO 8601 time with a zone, e.g. 2026-12-02T08:00:00+00:00") from None
    if effective.tzinfo is None:
        raise HeraldError("--effective-from: must carry a time zone")
    async with await _ledger_pool() as pool:
        version = await publish_policy(pool, rules, effective_from=effective, owner=args.owner, note=args.note)
    print(f"published policy v{version}, effective from {effective.isoformat()}")
    return 0


async def cmd_consent_grant(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from herald.ledger.policy_store import grant_consent, recipient_fingerprint
    from herald.send_policy import Category

    async with await _ledger_pool() as pool:
        await grant_consent(
            pool, fingerprint=recipient_fingerprint(args.recipient), category=Category(args.category),
            source=args.source, granted_at=datetime.now(UTC),
        )  # fmt: skip
    print(f"consent recorded for {args.category} (recipient fingerprint {recipient_fingerprint(args.recipient)[:16]})")
    return 0


async def cmd_suppression_lift(args: argparse.Namespace) -> int:
    from herald.ledger.policy_store import lift_suppression, recipient_fingerprint

    async with await _ledger_pool() as pool:
        at = await lift_suppression(
            pool, fingerprint=recipient_fingerprint(args.recipient), channel=args.channel,
            operator=args.operator, reason=args.reason,
        )  # fmt: skip
    print(f"suppression lifted at {at.isoformat()} (evidence before it no longer suppresses)")
    return 0


def _render_data(items: list[str] | None) -> dict[str, str | int]:
    data: dict[str, str | int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise HeraldError(f"--data {name!r}: must be NAME=VALUE")
        data[name] = int(value) if value.isascii() and value.isdigit() and not value.startswith("0") else value
    return data


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python starter.py", description="Send, inspect and cancel Herald intents.")
    commands = parser.add_subparsers(dest="command", required=True)

    send = commands.add_parser("send", help="create one intent (or attach to the one its key names)")
    send.add_argument("--file", help='JSON file with the whole request; with "channels": [...], a notice on several channels')
    send.add_argument("--key", help="business idempotency key, e.g. order_receipt:pay_157")
    send.add_argument("--channel", default="sms")
    send.add_argument("--to", help="recipient, E.164")
    send.add_argument("--template")
    send.add_argument("--version", type=int)
    send.add_argument("--data", action="append", metavar="NAME=VALUE")
    send.add_argument("--wait", action="store_true", help="wait for the final state")
    send.set_defaults(run=cmd_send)

    status = commands.add_parser(
        "status", help="a notice's channels side by side; with --channel, one intent with its ledger rows"
    )
    status.add_argument("key")
    status.add_argument("--channel", choices=["sms", "email"], help="one channel's intent in detail")
    status.set_defaults(run=cmd_status)

    cancel = commands.add_parser("cancel", help="close an intent's future work")
    cancel.add_argument("key")
    cancel.add_argument("--channel", default="sms")
    cancel.add_argument("--reason", required=True)
    cancel.add_argument("--operator", required=True)
    cancel.set_defaults(run=cmd_cancel)

    report = commands.add_parser("report", help="the numbers Herald keeps about itself, from the ledger")
    report.set_defaults(run=cmd_report)

    demo = commands.add_parser("demo", help="play the demo scenario against a running local stack")
    demo.add_argument("--emulator-url", help="the emulator's base URL (default: from temporal-dev.yaml)")
    demo.set_defaults(run=cmd_demo)

    artifact = commands.add_parser("artifact", help="immutable attachments, stored by content")
    artifact_commands = artifact.add_subparsers(dest="artifact_command", required=True)
    artifact_put = artifact_commands.add_parser("put", help="store a file; prints its ref as JSON")
    artifact_put.add_argument("file", metavar="FILE")
    artifact_put.add_argument("--media-type", help="e.g. application/pdf (default: guessed from FILE's name)")
    artifact_put.add_argument("--filename", help="the name recipients see (default: FILE's name)")
    artifact_put.set_defaults(run=cmd_artifact_put)

    policy = commands.add_parser("policy", help="the send policy: list, show, publish a new version")
    policy_commands = policy.add_subparsers(dest="policy_command", required=True)
    policy_commands.add_parser("list", help="every published version").set_defaults(run=cmd_policy_list)
    show = policy_commands.add_parser("show", help="one version's rules")
    show.add_argument("version", type=int)
    show.set_defaults(run=cmd_policy_show)
    publish_policy_cmd = policy_commands.add_parser("publish", help="publish FILE (JSON rules) as the next version")
    publish_policy_cmd.add_argument("file", metavar="FILE")
    publish_policy_cmd.add_argument("--owner", required=True, help="who owns this version (a team or a person)")
    publish_policy_cmd.add_argument("--note", default="", help="why it changed")
    publish_policy_cmd.add_argument("--effective-from", help="ISO 8601 with a zone (default: now)")
    publish_policy_cmd.set_defaults(run=cmd_policy_publish)

    consent = commands.add_parser("consent", help="record consent evidence for a recipient and category")
    consent_commands = consent.add_subparsers(dest="consent_command", required=True)
    grant = consent_commands.add_parser("grant")
    grant.add_argument("recipient")
    grant.add_argument("category", choices=["transactional", "account", "marketing"])
    grant.add_argument("--source", required=True, help="where the evidence is (a form, a checkbox id)")
    grant.set_defaults(run=cmd_consent_grant)

    suppression = commands.add_parser("suppression", help="lift a recipient's suppression, with a recorded reason")
    suppression_commands = suppression.add_subparsers(dest="suppression_command", required=True)
    lift = suppression_commands.add_parser("lift")
    lift.add_argument("recipient")
    lift.add_argument("--channel", choices=["sms", "email"], required=True)
    lift.add_argument("--operator", required=True)
    lift.add_argument("--reason", required=True)
    lift.set_defaults(run=cmd_suppression_lift)

    template = commands.add_parser("template", help="versioned templates: preview a rendering, publish a version")
    template_commands = template.add_subparsers(dest="template_command", required=True)
    preview = template_commands.add_parser("preview", help="render with data; print subject, body, encoding, segments")
    preview.add_argument("template_id")
    preview.add_argument("version", help="a version number or 'latest'", type=lambda v: int(v) if v.isdigit() else v)
    preview.add_argument("--data", action="append", metavar="NAME=VALUE")
    preview.set_defaults(run=cmd_template_preview)
    publish_cmd = template_commands.add_parser("publish", help="add FILE as a new version (refused if the version exists with other content)")
    publish_cmd.add_argument("template_id")
    publish_cmd.add_argument("version", type=int)
    publish_cmd.add_argument("file", metavar="FILE")
    publish_cmd.set_defaults(run=cmd_template_publish)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(args.run(args))
    except (HeraldError, InvalidSetting) as error:
        # A caller's mistake: one line naming the field (or variable) and the rule, no traceback.
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as error:
        print(f"error: cannot reach Herald's services ({type(error).__name__}: {error})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
