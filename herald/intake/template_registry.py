"""Versioned message templates: immutable, published contracts, and the pure render function.

A template version is a file ``templates/<template_id>/v<N>.txt``: comment lines, the contract,
then the body in ``string.Template`` syntax::

    # Order receipt: proof that a payment settled. Owned by the checkout team.
    # segments: 1                      (SMS: the most segments one rendered body may cost)
    # field order_ref: text max=40     (one typed line per placeholder: herald/intake/template_fields.py)
    # field amount: decimal
    ${merchant}: payment of ${amount} ...

An e-mail template says so (``# channel: email``) and carries its subject (``# subject: ...``).
It may carry an HTML part beside its text part: everything after a line ``# html:`` is the HTML
part, in the same placeholder syntax, every value HTML-escaped by ``render_message`` (never by
hand) and every placeholder in a place where escaped data is harmless (``herald/intake/template_html.py``;
a version that breaks a rule is refused when published and when loaded)::

    Hello ${name}, your order ${order_ref} shipped.
    # html:
    <p>Hello ${name}, your order <b>${order_ref}</b> shipped.</p>

The HTML part lives in the version's one file, not in a sibling ``v<N>.html``: one file, one
SHA-256 in ``published.json``, so the check that a published version never changes covers both
parts with no rule of its own. A sibling would need three more (an HTML file added beside a
published text, one without its record, two parts published apart), each a way to change what a
queued intent renders.

Published means recorded in ``templates/published.json`` with the SHA-256 of the file: a version
never changes once published, so an intent queued under v1 renders the same bytes on its tenth
retry as on its first, and a file whose bytes differ from its record is refused, not rendered.
``publish`` adds a version (refusing other content under an existing one); the alias ``latest``
resolves to the highest published version when an intent is created, and is never stored.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from herald.core.segments import SegmentCount, count_segments
from herald.intake.template_fields import (
    FieldSpec,
    FieldSpecError,
    contract_model,
    parse_field_line,
    validate_render_data,
)
from herald.intake.template_html import HtmlPartRefused, check_html_part, check_placeholder_syntax, escape_value

_ID_RULE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
ID_RULE = "must be lower-case letters, digits and underscores, starting with a letter (at most 64)"
# Versions are counted, not dates: five digits is room for a release a day for 270 years.
MAX_TEMPLATE_VERSION = 99_999
VERSION_RULE = f"must be a whole number from 1 to {MAX_TEMPLATE_VERSION}"
# What published.json may hold: `<template_id>/v<N>`; anything else was written by hand and is ignored.
_RECORD_KEY = re.compile(r"^([a-z][a-z0-9_]{0,63})/v([1-9][0-9]{0,4})$")
_FIELDS_PREFIX = "# fields:"
_FIELD_PREFIX = "# field "
_CHANNEL_PREFIX = "# channel:"
_SUBJECT_PREFIX = "# subject:"
_SEGMENTS_PREFIX = "# segments:"
_CATEGORY_PREFIX = "# category:"
# The line after which the rest of the file is an e-mail's HTML part, verbatim ('#' lines included).
_HTML_MARKER = "# html:"
CATEGORIES = ("transactional", "account", "marketing")
LATEST = "latest"
PUBLISHED_FILE = "published.json"
# Provider limit territory: Twilio accepts up to 1,600 characters per message body.
MAX_BODY_CHARS = 1600
# Twilio's advice: keep a message under 10 segments. A template says less where it can.
DEFAULT_SEGMENT_LIMIT = 10
# An e-mail's text part: generous, but bounded (it is rendered into workflow history).
MAX_EMAIL_BODY_CHARS = 100_000
# Its HTML part, rendered into history beside it: the same bound (markup and escaping take room, so
# a template leaves its data less of it).
MAX_EMAIL_HTML_CHARS = 100_000
# RFC 5322 caps a header line at 998 characters; a subject needs far less.
MAX_SUBJECT_CHARS = 200


class TemplateError(ValueError):
    """A template or its data broke a rule; ``field`` names the request field at fault."""

    def __init__(self, field: str, rule: str, problems: list[tuple[str, str]] | None = None) -> None:
        self.field = field
        self.rule = rule
        # Every problem found (render data can break several rules at once); the first is field/rule.
        self.problems = problems or [(field, rule)]
        super().__init__(f"{field}: {rule}")


@dataclass(frozen=True)
class Template:
    template_id: str
    version: int
    fields: frozenset[str]
    body: string.Template
    channel: str = "sms"
    subject: string.Template | None = None
    field_specs: tuple[FieldSpec, ...] = ()
    segment_limit: int | None = None  # SMS only
    contract: type[BaseModel] | None = None
    # What the message is for (herald.core.send_policy.Category): consent, quiet hours and suppression
    # are decided per category. A template without the line is transactional.
    category: str = "transactional"
    # E-mail only: the HTML part, whose values render_message escapes (None: text only).
    html: string.Template | None = None


@dataclass(frozen=True)
class Rendered:
    """One rendered message: the exact bytes every attempt sends."""

    body: str
    subject: str | None = None
    segments: SegmentCount | None = None  # SMS only
    category: str = "transactional"
    # E-mail only: the HTML part, every render value in it HTML-escaped (None: the template has none).
    html_body: str | None = None


def _root() -> Any:
    return resources.files("herald") / "templates"


@functools.lru_cache(maxsize=1)
def published() -> dict[str, str]:
    """``<template_id>/v<N>`` -> SHA-256 of the file as published; a record whose key is not of that
    form (a hand edit) is left out, so one bad line cannot break every `latest` request."""
    records = json.loads((_root() / PUBLISHED_FILE).read_text(encoding="utf-8"))
    return {key: digest for key, digest in records.items() if _RECORD_KEY.match(key) and isinstance(digest, str)}


def check_id_and_version(template_id: str, version: int) -> None:
    """Raise TemplateError unless both are what a template's path may be built from: no path
    outside the templates folder is ever read or written."""
    if not isinstance(template_id, str) or not _ID_RULE.match(template_id):
        raise TemplateError("template_id", ID_RULE)
    if type(version) is not int or not 1 <= version <= MAX_TEMPLATE_VERSION:
        raise TemplateError("template_version", VERSION_RULE)


def resolve_version(template_id: str, version: int | str) -> int:
    """A concrete version: ``latest`` becomes the highest published version of `template_id`."""
    if version != LATEST:
        return int(version)
    if not _ID_RULE.match(template_id):
        raise TemplateError("template_id", ID_RULE)
    versions = available_templates().get(template_id)
    if not versions:
        raise TemplateError("template_id", f"unknown template {template_id!r}")
    return versions[-1]


@functools.lru_cache(maxsize=256)
def load_template(template_id: str, version: int) -> Template:
    """Read one published template version; a file that differs from its published hash is refused."""
    check_id_and_version(template_id, version)
    resource = _root() / template_id / f"v{version}.txt"
    if not resource.is_file():
        if not (_root() / template_id).is_dir():
            raise TemplateError("template_id", f"unknown template {template_id!r}")
        raise TemplateError("template_version", f"template {template_id!r} has no version {version}")
    raw = resource.read_bytes()
    recorded = published().get(f"{template_id}/v{version}")
    if recorded != hashlib.sha256(raw).hexdigest():
        rule = "is not published" if recorded is None else "differs from its published content (versions never change)"
        raise TemplateError("template_version", f"{template_id} v{version} {rule}")
    return parse_template(template_id, version, raw.decode("utf-8"))


def parse_template(template_id: str, version: int, text: str) -> Template:
    """A template version from its file's text (the contract checked, nothing rendered)."""
    where = f"{template_id} v{version}"
    text, html_text = _split_html(text, where)
    lines = text.splitlines()
    try:
        specs = tuple(parse_field_line(line) for line in lines if line.startswith(_FIELD_PREFIX))
    except FieldSpecError as error:
        raise TemplateError("template_id", f"{where}: {error}") from None
    fields_lines = [line for line in lines if line.startswith(_FIELDS_PREFIX)]
    if specs and fields_lines:
        raise TemplateError("template_id", f"{where}: declare fields either typed (# field) or listed (# fields:), not both")
    if not specs:
        if len(fields_lines) != 1:
            raise TemplateError("template_id", f"{where} must declare its fields once")
        # A bare list: each field is text of at most 500 characters.
        specs = tuple(FieldSpec(name, "text") for name in fields_lines[0][len(_FIELDS_PREFIX) :].split())
    channel = _header(lines, _CHANNEL_PREFIX) or "sms"
    subject = _header(lines, _SUBJECT_PREFIX)
    if (channel == "email") != (subject is not None):
        raise TemplateError("template_id", f"{where}: an e-mail template, and only one, has a subject")
    segments = _header(lines, _SEGMENTS_PREFIX)
    if segments is not None and (channel != "sms" or not segments.isdigit() or int(segments) < 1):
        raise TemplateError("template_id", f"{where}: '# segments:' is a whole number of at least 1, for SMS only")
    category = _header(lines, _CATEGORY_PREFIX) or "transactional"
    if category not in CATEGORIES:
        raise TemplateError("template_id", f"{where}: '# category:' is one of {', '.join(CATEGORIES)}")
    body = "\n".join(line for line in lines if not line.startswith("#")).strip()
    names = frozenset(spec.name for spec in specs)
    placeholders = _placeholders(body) | (_placeholders(subject) if subject else set())
    if html_text is not None:
        if channel != "email":
            rule = f"only an e-mail template has an HTML part ('{_HTML_MARKER}')"
            raise TemplateError("template_id", f"{where}: {rule}")
        placeholders |= _placeholders(html_text)
    try:
        # A '$' that starts no placeholder would fail at render time, after the intent was accepted.
        for part in (body, subject or "", html_text or ""):
            check_placeholder_syntax(part)
        if html_text is not None:
            check_html_part(html_text)
    except HtmlPartRefused as refused:
        raise TemplateError("template_id", f"{where}: {refused}") from None
    if placeholders != names:
        raise TemplateError("template_id", f"{where}: placeholders {sorted(placeholders)} and declared fields {sorted(names)} differ")
    return Template(
        template_id=template_id,
        version=version,
        fields=names,
        body=string.Template(body),
        channel=channel,
        subject=string.Template(subject) if subject is not None else None,
        field_specs=specs,
        segment_limit=(int(segments) if segments else DEFAULT_SEGMENT_LIMIT) if channel == "sms" else None,
        contract=contract_model(f"{template_id}_v{version}", list(specs)),
        category=category,
        html=string.Template(html_text) if html_text is not None else None,
    )


def _split_html(text: str, where: str) -> tuple[str, str | None]:
    """The file's head (comments, contract, text part) and its HTML part (None without the marker)."""
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.startswith(_HTML_MARKER):
            if line.rstrip() != _HTML_MARKER:
                rule = f"'{_HTML_MARKER}' stands alone on its line; the HTML part follows it"
                raise TemplateError("template_id", f"{where}: {rule}")
            html_text = "".join(lines[index + 1 :]).strip()
            if not html_text:
                raise TemplateError("template_id", f"{where}: the HTML part after '{_HTML_MARKER}' is empty")
            return "".join(lines[:index]), html_text
    return text, None


def _placeholders(text: str) -> set[str]:
    return {m.group("named") or m.group("braced") for m in string.Template.pattern.finditer(text) if m.group("named") or m.group("braced")}


def _header(lines: list[str], prefix: str) -> str | None:
    found = [line[len(prefix) :].strip() for line in lines if line.startswith(prefix)]
    return found[0] if found else None


def render(template_id: str, version: int, data: dict[str, str | int]) -> str:
    """Render an SMS template version with its data; the same inputs always give the same bytes."""
    return render_message(template_id, version, data, channel="sms").body


def render_message(template_id: str, version: int, data: dict[str, str | int], *, channel: str) -> Rendered:
    """Render a template version for `channel`: the body, the subject of an e-mail, an SMS's segments.

    Raises:
        TemplateError: the template is for another channel, the data breaks its contract (every
            problem in ``problems``, by field path, never the value), or the body is over its limits.
    """
    template = load_template(template_id, version)
    if template.channel != channel:
        raise TemplateError("template_id", f"{template_id} v{version} is for the {template.channel} channel, not {channel}")
    if template.contract is not None:
        problems = validate_render_data(template.contract, data)
        if problems:
            raise TemplateError(problems[0][0], problems[0][1], problems)
    # Substituted values are inserted as they are: `${...}` or SQL inside data renders literally.
    values = {key: str(value) for key, value in data.items()}
    body = template.body.substitute(values)
    limit = MAX_EMAIL_BODY_CHARS if channel == "email" else MAX_BODY_CHARS
    if len(body) > limit:
        raise TemplateError("render_data", f"rendered body exceeds {limit} characters")
    if template.subject is None:
        segments = count_segments(body)
        if template.segment_limit is not None and segments.segments > template.segment_limit:
            raise TemplateError(
                "render_data",
                f"renders to {segments.describe()}; {template_id} v{version} allows at most {template.segment_limit}",
            )
        return Rendered(body=body, segments=segments, category=template.category)
    subject = template.subject.substitute(values)
    if len(subject) > MAX_SUBJECT_CHARS or "\n" in subject or "\r" in subject:
        raise TemplateError("render_data", f"rendered subject must be one line of at most {MAX_SUBJECT_CHARS} characters")
    html_body = None
    if template.html is not None:
        # Every value escaped here, by the engine: the text part above keeps the data verbatim.
        html_body = template.html.substitute({key: escape_value(value) for key, value in values.items()})
        if len(html_body) > MAX_EMAIL_HTML_CHARS:
            raise TemplateError("render_data", f"rendered HTML part exceeds {MAX_EMAIL_HTML_CHARS} characters")
    return Rendered(body=body, subject=subject, category=template.category, html_body=html_body)


def available_templates() -> dict[str, list[int]]:
    """Every published template id with its versions, for operators, `latest` and the demo."""
    found: dict[str, list[int]] = {}
    for key in published():
        template_id, version = _RECORD_KEY.match(key).groups()  # type: ignore[union-attr]  # published() kept only these
        found.setdefault(template_id, []).append(int(version))
    return {template_id: sorted(versions) for template_id, versions in sorted(found.items())}


class PublishRefused(ValueError):
    pass


def publish(template_id: str, version: int, text: str, *, root: Path) -> bool:
    """Record `text` as `template_id` v`version` under `root` (a checkout's herald/templates).

    Returns False when that exact content is already published (nothing changes). Raises
    PublishRefused for other content under an existing version, or a contract that does not parse.
    """
    try:
        check_id_and_version(template_id, version)
    except TemplateError as error:
        raise PublishRefused(str(error)) from None
    key = f"{template_id}/v{version}"
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:  # an unpaired surrogate: no file can hold it
        raise PublishRefused("text: must be UTF-8 text (it holds an unpaired surrogate)") from None
    record_path = root / PUBLISHED_FILE
    record = json.loads(record_path.read_text(encoding="utf-8"))
    digest = hashlib.sha256(encoded).hexdigest()
    if key in record:
        if record[key] != digest:
            raise PublishRefused(f"{key} is published with other content; a published version never changes: publish v{_next(record, template_id)}")
        return False
    try:
        parse_template(template_id, version, text)
    except TemplateError as error:
        raise PublishRefused(str(error)) from None
    path = root / template_id / f"v{version}.txt"
    if not path.resolve().is_relative_to(root.resolve()):
        raise PublishRefused("template_id: must name a folder inside the templates folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encoded)
    record[key] = digest
    record_path.write_text(json.dumps(dict(sorted(record.items())), indent=1) + "\n", encoding="utf-8")
    return True


def _next(record: dict[str, str], template_id: str) -> int:
    versions = [int(match.group(2)) for key in record if (match := _RECORD_KEY.match(key)) and match.group(1) == template_id]
    return 1 + max(versions, default=0)
