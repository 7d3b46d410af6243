"""The command line's argument tree: every command and action, its options, and its examples.

Each command's `run` is its group's function (``herald.cli.send``, ``status``, ...); ``--help``
shows every command with examples, and ``COMMAND --help`` one command's.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from herald.cli import input as cli_input
from herald.cli.artifact import cmd_artifact_put
from herald.cli.cancel import cmd_cancel
from herald.cli.consent import cmd_consent_grant
from herald.cli.erase import cmd_erase
from herald.cli.input import OneLineArgumentParser
from herald.cli.policy import cmd_policy_list, cmd_policy_publish, cmd_policy_show
from herald.cli.report import cmd_report
from herald.cli.send import cmd_send
from herald.cli.status import cmd_status
from herald.cli.suppression import cmd_suppression_lift, cmd_suppression_list
from herald.cli.template import cmd_template_preview, cmd_template_publish
from herald.core.message import Channel
from herald.core.send_policy import Category

PROG = "python starter.py"

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


def _on_the_record(command: argparse.ArgumentParser, who: str, why: str) -> None:
    """--operator and --reason, both required: who acted and why, as the ledger records them."""
    command.add_argument(
        "--operator", required=True, type=cli_input.bounded_text(100), help=f"{who} (1-100 characters)"
    )
    command.add_argument("--reason", required=True, type=cli_input.bounded_text(500), help=f"{why} (1-500 characters)")


def _channel_option(command: argparse.ArgumentParser, help: str, **options: Any) -> None:
    """--channel, one of Herald's channels."""
    command.add_argument("--channel", choices=[channel.value for channel in Channel], help=help, **options)


def _recipient_argument(command: argparse.ArgumentParser, help: str) -> None:
    command.add_argument("recipient", metavar="RECIPIENT", help=help)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog=PROG,
        description="Send, inspect and cancel Herald intents; keep templates, the send policy, consent and artifacts.",
        epilog=_examples(*EXAMPLES) + "\n\n"
        "exit codes: 0 done, 2 bad input or settings (one line naming the option and the rule),\n"
        "1 a service failed or could not be reached, 3 erase done in part (run it again later),\n"
        "130 interrupted. Nothing is connected to before every input has been checked. Settings:\n"
        "HERALD_* variables and DATABASE_URL, over the file HERALD_ENV_FILE names (by default the\n"
        "running local stack's .state/stack.env).",
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
    _channel_option(send, "the channel (default: sms)")
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
    _channel_option(status, "one channel's intent in detail")
    status.set_defaults(run=cmd_status)

    cancel = _command(commands, "cancel", "close an intent's future work", "cancel")
    cancel.add_argument("key", type=cli_input.business_key, help=key_help)
    _channel_option(cancel, "the intent's channel (default: sms)", default="sms")
    _on_the_record(cancel, "who cancels", "why, for the record")
    cancel.set_defaults(run=cmd_cancel)

    report = _command(commands, "report", "the numbers Herald keeps about itself, from the ledger", "report")
    report.set_defaults(run=cmd_report)

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
        "file", metavar="FILE", help="a JSON file of rules (herald.core.send_policy.PolicyRules)"
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
    _recipient_argument(grant, "an E.164 number or an e-mail address (stored only as its SHA-256)")
    grant.add_argument(
        "category",
        metavar="CATEGORY",
        choices=[category.value for category in Category],
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
    _recipient_argument(lift, "the E.164 number (sms) or e-mail address (email)")
    _channel_option(lift, "the channel whose suppression is lifted", required=True)
    _on_the_record(lift, "who lifts it", "why, for the record")
    lift.set_defaults(run=cmd_suppression_lift)
    listing = _command(
        suppression_commands,
        "list",
        "RECIPIENT's requests (STOP, START, HELP, unsubscribes) and providers' evidence, and what suppresses now",
        "suppression list",
    )
    _recipient_argument(listing, "the E.164 number (sms) or e-mail address (email)")
    _channel_option(listing, "the channel (default: sms for a number, email for an address)")
    listing.set_defaults(run=cmd_suppression_list)

    erase = _command(
        commands,
        "erase",
        "erase a recipient's personal data from the outbox, Temporal and the ledger; exit 3 if an intent "
        "was still running (run it again later)",
        "erase",
    )
    _recipient_argument(erase, "the E.164 number or e-mail address whose data is erased")
    _on_the_record(erase, "who erases", "the request it answers")
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
