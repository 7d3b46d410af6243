"""How a settings section is read from environment variables, and how a bad one is refused.

A section (``Section``) is a frozen model whose fields carry, each, the exact name of the variable
that sets it (its alias) and its shape with a ``Rule`` (herald/setting_rules.py). Code builds a
section by field name; ``read_section`` builds it from variables: the variables present (blank is
unset, values are stripped) are handed to each field by its alias, nested sections included, and a
refusal becomes one ``InvalidSetting`` line, ``NAME: rule``, that never repeats the value: values
here are passwords, tokens, keys and database URLs. ``rules_of`` lists every variable of a model
with its rule. The sections themselves, and their defaults, are in ``herald.settings``.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AliasChoices, BaseModel, ConfigDict, SecretBytes, ValidationError
from pydantic.fields import FieldInfo

from herald.setting_rules import Rule, refusal

GRPC_META_PREFIX = "TEMPORAL_GRPC_META_"
# A file of NAME=value lines whose variables a process reads under its environment's (``environment``).
ENV_FILE = "HERALD_ENV_FILE"


class InvalidSetting(ValueError):
    """An environment variable holds a value Herald cannot use; the message names it and the rule."""

    def __init__(self, name: str, rule: str) -> None:
        self.name = name
        super().__init__(f"{name}: {rule}")


class Section(BaseModel):
    """One settings section: what one adapter, server or command takes, each field named after its variable."""

    # Built by field name in code and tests, by variable name from the environment. Defaults are
    # Herald's own constants, not input: only what was given is validated. Errors never quote input.
    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True, hide_input_in_errors=True
    )


S = TypeVar("S", bound=BaseModel)


# ---- the variables of a model -----------------------------------------------------------------


def _names(field: FieldInfo) -> list[str]:
    """The variables that set a field (several when a standard name stands in for Herald's own)."""
    alias = field.validation_alias or field.alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    return [alias] if isinstance(alias, str) else []


def _section_of(annotation: Any) -> type[BaseModel] | None:
    """The section a field holds (also inside `X | None`), or None for a plain value."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, Section):
            return candidate
    return None


def _rule_of(field: FieldInfo) -> str:
    """The field's Rule, also when it sits inside `X | None` or a nested Annotated."""
    pending: list[Any] = [*field.metadata, field.annotation]
    while pending:
        item = pending.pop(0)
        if isinstance(item, Rule):
            return item.text
        if typing.get_origin(item) is Annotated:
            pending.extend(item.__metadata__)
            pending.append(typing.get_args(item)[0])
        else:
            pending.extend(arg for arg in typing.get_args(item) if arg is not type(None))
    raise TypeError(f"{_names(field)} declares no Rule")


def rules_of(model: type[BaseModel]) -> dict[str, str]:
    """Every variable that sets `model` or a section inside it, with its rule."""
    rules: dict[str, str] = {}
    for field in model.model_fields.values():
        section = _section_of(field.annotation)
        if section is not None:
            rules.update(rules_of(section))
        for name in _names(field):
            rules[name] = _rule_of(field)
    return rules


def _nest(model: type[BaseModel], given: Mapping[str, Any]) -> dict[str, Any]:
    """The given variables `model` reads, keyed by alias and nested as its sections are; a section
    none of whose variables is given is left out, so it keeps its default."""
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        section = _section_of(field.annotation)
        if section is not None:
            nested = _nest(section, given)
            if nested:
                values[name] = nested
        # The first one given: a standard name standing in for Herald's own is then not even read.
        present = [variable for variable in _names(field) if variable in given]
        if present:
            values[present[0]] = given[present[0]]
    return values


# ---- reading and refusing ---------------------------------------------------------------------


def given_variables(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables set in `env` (the process's environment when None). Blank is unset and values
    are stripped (a trailing space pasted into a secret store is a mistake, never part of a port);
    the open-ended TEMPORAL_GRPC_META_* family is gathered under the one name that stands for it."""
    present = {name: value.strip() for name, value in (os.environ if env is None else env).items() if value.strip()}
    grpc_meta = {name: value for name, value in present.items() if name.startswith(GRPC_META_PREFIX)}
    if grpc_meta:
        present[GRPC_META_PREFIX + "*"] = grpc_meta  # type: ignore[assignment]
    return present


def environment(default_env_file: Path | None = None) -> dict[str, str]:
    """The process's environment over the variables of an env file: the one HERALD_ENV_FILE names
    (refused when it cannot be read), else `default_env_file` when it exists. A variable set in the
    environment wins over the file's; lines are ``NAME=value``, blank lines and ``#`` comments skipped.

    The file is how a command finds a stack that exports nothing: the local launcher writes the
    variables of the stack it started to one (``python starter.py`` looks in ``.state/stack.env``).
    """
    named = os.environ.get(ENV_FILE, "").strip()
    path = Path(named) if named else default_env_file
    merged: dict[str, str] = {}
    if path is not None and (named or path.exists()):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or "not UTF-8 text"
            raise InvalidSetting(ENV_FILE, f"{path}: cannot be read ({reason})") from None
        for line in lines:
            name, _, value = line.partition("=")
            if name.strip() and not name.lstrip().startswith("#"):
                merged[name.strip()] = value
    merged.update(os.environ)
    return merged


def _as_invalid_setting(error: ValidationError, rules: Mapping[str, str]) -> InvalidSetting:
    """The first refusal as one line naming its variable; pydantic's own text, which quotes the
    input, is never used."""
    problems = error.errors(include_url=False, include_input=False)
    # A value given and refused says more than a value missing (half of a pair, say).
    first = next((problem for problem in problems if problem["type"] != "missing"), problems[0])
    context = first.get("ctx") or {}
    located = [part for part in first["loc"] if isinstance(part, str) and part in rules]
    variable = context.get("variable") or (located[-1] if located else "HERALD_*")
    return InvalidSetting(variable, context.get("rule") or rules.get(variable) or "is not a usable value")


def read_section(model: type[S], given: Mapping[str, Any], **built: Any) -> S:
    """`model` from the variables in `given` (from ``given_variables``), plus fields already `built`;
    InvalidSetting names the first variable refused."""
    try:
        return model.model_validate({**_nest(model, given), **built})
    except ValidationError as error:
        raise _as_invalid_setting(error, rules_of(model)) from None


# ---- keyrings: payload keys (herald/payload_codec.py), fingerprint keys (herald/fingerprints.py) ----

_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_KEY_BYTES = 32  # AES-256 payload keys, HMAC-SHA-256 fingerprint keys


def items(value: str | None) -> list[str]:
    """A comma-separated list; blanks around and between items are dropped."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _key_entry(name: str, where: str, entry: str, keys: dict[str, SecretBytes], purpose: str) -> None:
    """Add one `id:base64key` entry to `keys`. A refusal may name the id, never the key."""
    key_id, colon, encoded = (part.strip() for part in entry.partition(":"))
    if not colon or not _KEY_ID.fullmatch(key_id):
        raise refusal(f"{where}each key must be id:base64key, the id 1-64 letters, digits, '.', '_' or '-'", name)
    try:
        key = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise refusal(f"{where}key {key_id}: must be standard base64", name) from None
    if len(key) != _KEY_BYTES:
        raise refusal(f"{where}key {key_id}: must decode to 32 bytes ({purpose}), not {len(key)}", name)
    if key_id in keys:
        raise refusal(f"{where}key id {key_id} is given twice", name)
    keys[key_id] = SecretBytes(key)


def keyring(
    entries: str | None, files: str | None, active: str | None, *, prefix: str, purpose: str
) -> dict[str, SecretBytes]:
    """Keys from <prefix>_KEYS, then from each file of <prefix>_KEY_FILES (mounted secrets, one a
    line); the active id <prefix>_ACTIVE_KEY, when given, must be one of them."""
    keys: dict[str, SecretBytes] = {}
    for entry in items(entries):
        _key_entry(f"{prefix}_KEYS", "", entry, keys, purpose)
    for path in items(files):
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or "not UTF-8 text"
            raise refusal(f"{path}: cannot be read ({reason})", f"{prefix}_KEY_FILES") from None
        for number, line in enumerate(lines, 1):
            if line.strip() and not line.lstrip().startswith("#"):
                _key_entry(f"{prefix}_KEY_FILES", f"{path} line {number}: ", line, keys, purpose)
    # An active id without its key must not quietly mean "no key".
    if active is not None and active not in keys:
        held = ", ".join(keys) or "none"
        raise refusal(
            f"must be the id of a key in {prefix}_KEYS or {prefix}_KEY_FILES (configured ids: {held})",
            f"{prefix}_ACTIVE_KEY",
        )
    return keys
