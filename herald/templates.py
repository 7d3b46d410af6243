"""Versioned message templates and the pure render function.

A template version is an immutable file ``templates/<template_id>/v<N>.txt``:
comment lines, one ``# fields:`` line naming every placeholder, then the body in
``string.Template`` syntax. An e-mail template says so (``# channel: email``) and
carries its subject line (``# subject: ...``, same syntax); a template without a
channel line is an SMS template. Versions are never edited in place: a changed
wording is a new file, so an intent queued under v1 renders the same bytes on
its tenth retry as on its first.
"""

from __future__ import annotations

import functools
import re
import string
from dataclasses import dataclass
from importlib import resources

_ID_RULE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_FIELDS_PREFIX = "# fields:"
_CHANNEL_PREFIX = "# channel:"
_SUBJECT_PREFIX = "# subject:"
# Provider limit territory: Twilio accepts up to 1,600 characters per message body.
MAX_BODY_CHARS = 1600
# An e-mail's text part: generous, but bounded (it is rendered into workflow history).
MAX_EMAIL_BODY_CHARS = 100_000
# RFC 5322 caps a header line at 998 characters; a subject needs far less.
MAX_SUBJECT_CHARS = 200


class TemplateError(ValueError):
    """A template or its data broke a rule; ``field`` names the request field at fault."""

    def __init__(self, field: str, rule: str) -> None:
        self.field = field
        self.rule = rule
        super().__init__(f"{field}: {rule}")


@dataclass(frozen=True)
class Template:
    template_id: str
    version: int
    fields: frozenset[str]
    body: string.Template
    channel: str = "sms"
    subject: string.Template | None = None


@dataclass(frozen=True)
class Rendered:
    """One rendered message: the exact bytes every attempt sends."""

    body: str
    subject: str | None = None


@functools.lru_cache(maxsize=256)
def load_template(template_id: str, version: int) -> Template:
    """Read one immutable template version shipped with Herald."""
    if not _ID_RULE.match(template_id):
        raise TemplateError("template_id", "must be lower-case letters, digits and underscores")
    if version < 1:
        raise TemplateError("template_version", "must be a whole number of at least 1")
    resource = resources.files("herald") / "templates" / template_id / f"v{version}.txt"
    if not resource.is_file():
        if not (resources.files("herald") / "templates" / template_id).is_dir():
            raise TemplateError("template_id", f"unknown template {template_id!r}")
        raise TemplateError("template_version", f"template {template_id!r} has no version {version}")
    lines = resource.read_text(encoding="utf-8").splitlines()
    fields_lines = [line for line in lines if line.startswith(_FIELDS_PREFIX)]
    if len(fields_lines) != 1:
        raise TemplateError("template_id", f"template {template_id!r} v{version} must declare its fields once")
    fields = frozenset(fields_lines[0][len(_FIELDS_PREFIX) :].split())
    channel = _header(lines, _CHANNEL_PREFIX) or "sms"
    subject = _header(lines, _SUBJECT_PREFIX)
    if (channel == "email") != (subject is not None):
        raise TemplateError("template_id", f"template {template_id!r} v{version}: an e-mail template, and only one, has a subject")
    body = "\n".join(line for line in lines if not line.startswith("#")).strip()
    return Template(
        template_id=template_id,
        version=version,
        fields=fields,
        body=string.Template(body),
        channel=channel,
        subject=string.Template(subject) if subject is not None else None,
    )


def _header(lines: list[str], prefix: str) -> str | None:
    found = [line[len(prefix) :].strip() for line in lines if line.startswith(prefix)]
    return found[0] if found else None


def render(template_id: str, version: int, data: dict[str, str | int]) -> str:
    """Render an SMS template version with its data; the same inputs always give the same bytes."""
    return render_message(template_id, version, data, channel="sms").body


def render_message(template_id: str, version: int, data: dict[str, str | int], *, channel: str) -> Rendered:
    """Render a template version for `channel`: the body, and the subject of an e-mail."""
    template = load_template(template_id, version)
    if template.channel != channel:
        raise TemplateError("template_id", f"{template_id} v{version} is for the {template.channel} channel, not {channel}")
    missing = sorted(template.fields - data.keys())
    if missing:
        raise TemplateError(f"render_data.{missing[0]}", f"required by {template_id} v{version}")
    unexpected = sorted(data.keys() - template.fields)
    if unexpected:
        raise TemplateError(f"render_data.{unexpected[0]}", f"not a field of {template_id} v{version}")
    values = {key: str(value) for key, value in data.items()}
    body = template.body.substitute(values)
    limit = MAX_EMAIL_BODY_CHARS if channel == "email" else MAX_BODY_CHARS
    if len(body) > limit:
        raise TemplateError("render_data", f"rendered body exceeds {limit} characters")
    if template.subject is None:
        return Rendered(body=body)
    subject = template.subject.substitute(values)
    if len(subject) > MAX_SUBJECT_CHARS or "\n" in subject or "\r" in subject:
        raise TemplateError("render_data", f"rendered subject must be one line of at most {MAX_SUBJECT_CHARS} characters")
    return Rendered(body=body, subject=subject)


def available_templates() -> dict[str, list[int]]:
    """Every template id with its versions, for operators and the demo."""
    root = resources.files("herald") / "templates"
    found: dict[str, list[int]] = {}
    for directory in root.iterdir():
        if directory.is_dir() and _ID_RULE.match(directory.name):
            versions = sorted(
                int(item.name[1:-4]) for item in directory.iterdir() if re.fullmatch(r"v\d+\.txt", item.name)
            )
            if versions:
                found[directory.name] = versions
    return dict(sorted(found.items()))
