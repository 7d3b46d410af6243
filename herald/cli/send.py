"""`send`: one intent, or a notice on several channels, validated and rendered before anything is connected to."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from herald import cli_input
from herald.cli.connections import herald_client
from herald.cli_input import CliInputError
from herald.client import HeraldClient
from herald.errors import InvalidIntent
from herald.fingerprints import Keyring
from herald.intent import IntentRequest, build_intent, parse_request
from herald.notice import NoticeRequest, parse_notice
from herald.runtime.process import ProcessRuntime
from herald.templates import TemplateError, load_template, resolve_version

# The options that build a request on the command line, which --file replaces as a whole.
_REQUEST_OPTIONS = (("key", "--key"), ("to", "--to"), ("template", "--template"), ("version", "--version"),
                    ("data", "--data"), ("channel", "--channel"), ("tenant", "--tenant"),
                    ("priority", "--priority"))  # fmt: skip


def send_request(args: argparse.Namespace, keyring: Keyring) -> IntentRequest | NoticeRequest:
    """The request of `send`, validated and rendered (so nothing can be refused after connecting);
    fingerprinted under `keyring` as the client will fingerprint it."""
    given = [option for dest, option in _REQUEST_OPTIONS if getattr(args, dest) is not None]
    now = datetime.now(UTC)
    if args.file is not None:
        if given:
            raise CliInputError("--file", f"holds the whole request: leave out {', '.join(given)}")
        raw = cli_input.read_json_object(args.file, "--file")
        if "channels" in raw:
            notice = parse_notice(raw)
            for request in notice.requests():
                build_intent(request, now, keyring)  # renders: a data or template problem is found here
            return notice
        request = parse_request(raw)
        build_intent(request, now, keyring)
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
        build_intent(request, now, keyring)
    except InvalidIntent as refused:  # named as typed: --to, not recipient
        raise InvalidIntent(cli_input.name_options(refused.problems)) from None
    return request


def _field_kinds(template_id: str, version: int | str) -> dict[str, str]:
    """The kind of each field of the template, or none when there is no such template (the intent's
    validation then says so, by field)."""
    try:
        template = load_template(template_id, resolve_version(template_id, version))
    except TemplateError:
        return {}
    return {spec.name: spec.kind for spec in template.field_specs}


async def cmd_send(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    # Settings first (the stack's env file included): the intent is fingerprinted as it is built,
    # here and again in the client, under the keys they name; none is refused in one line.
    request = send_request(args, runtime.keyring())
    herald = await herald_client(runtime)  # Temporal first: a send without it can do nothing
    async with runtime.optional_vault() as vault:  # seals personal fields with the recipient's key (ledger)
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
