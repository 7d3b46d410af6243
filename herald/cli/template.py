"""`template preview` and `template publish`: versioned templates, rendered or added in this checkout."""

from __future__ import annotations

import argparse
from pathlib import Path

from herald import cli_input
from herald.errors import HeraldError
from herald.runtime.process import ProcessRuntime
from herald.templates import PublishRefused, TemplateError, load_template, publish, render_message, resolve_version

# Where `template publish` adds a version: the checkout's own templates.
TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


async def cmd_template_preview(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    """Render a version with data (an e-mail's HTML part too), and say what it costs: no service is contacted."""
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


async def cmd_template_publish(args: argparse.Namespace, runtime: ProcessRuntime) -> int:
    """Publish FILE as a template version in this checkout (a published version never changes)."""
    text = cli_input.read_text(args.file, "FILE", max_bytes=cli_input.MAX_TEMPLATE_BYTES)
    try:
        added = publish(args.template_id, args.version, text, root=TEMPLATES)
    except PublishRefused as refused:
        refusal = str(refused)
        # A refused id or version is named by its argument and never echoed (it may be a path).
        for field, positional in (("template_id:", "TEMPLATE_ID:"), ("template_version:", "VERSION:")):
            if refusal.startswith(field):
                raise HeraldError(positional + refusal[len(field) :]) from None
        raise HeraldError(f"{args.template_id} v{args.version}: {refusal}") from None
    print(f"{args.template_id} v{args.version} " + ("published" if added else "already published with this content"))
    return 0
