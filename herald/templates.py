"""Versioned message templates and the pure render function.

A template version is an immutable file ``templates/<template_id>/v<N>.txt``:
comment lines, one ``# fields:`` line naming every placeholder, then the body in
``string.Template`` syntax. Versions are never edited in place: a changed
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
# Provider limit territory: Twilio accepts up to 1,600 characters per message body.
MAX_BODY_CHARS = 1600


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
    body = "\n".join(line for line in lines if not line.startswith("#")).strip()
    return Template(template_id=template_id, version=version, fields=fields, body=string.Template(body))


def render(template_id: str, version: int, data: dict[str, str | int]) -> str:
    """Render a template version with its data; the same inputs always give the same bytes."""
    template = load_template(template_id, version)
    missing = sorted(template.fields - data.keys())
    if missing:
        raise TemplateError(f"render_data.{missing[0]}", f"required by {template_id} v{version}")
    unexpected = sorted(data.keys() - template.fields)
    if unexpected:
        raise TemplateError(f"render_data.{unexpected[0]}", f"not a field of {template_id} v{version}")
    body = template.body.substitute({key: str(value) for key, value in data.items()})
    if len(body) > MAX_BODY_CHARS:
        raise TemplateError("render_data", f"rendered body exceeds {MAX_BODY_CHARS} characters")
    return body


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
