"""A template version's render-data contract: one typed field per placeholder.

Declared in the template file, one line per field::

    # field order_ref: text max=40
    # field amount: decimal
    # field currency: code pattern=^[A-Z]{3}$
    # field hold_minutes: int min=1 max=240

Kinds: ``text`` (any sendable text; ``max`` characters, 500 by default), ``int`` (a whole number,
``min``/``max``), ``decimal`` (a plain decimal string such as ``42.50``), ``code`` (text matching
``pattern``, for identifiers and codes). Every field is required and no other field is accepted.
The contract becomes a pydantic model, so errors name ``render_data.<field>`` and the rule, never
the value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictStr, ValidationError, create_model

DEFAULT_TEXT_MAX = 500
_DECIMAL = r"^-?[0-9]{1,15}(\.[0-9]{1,6})?$"
_LINE = re.compile(r"^# field ([a-z][a-z0-9_]{0,63}): (text|int|decimal|code)((?: [a-z]+=\S+)*)$")


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: str
    options: tuple[tuple[str, str], ...] = ()

    def option(self, name: str) -> str | None:
        return dict(self.options).get(name)

    def describe(self) -> str:
        extra = " ".join(f"{key}={value}" for key, value in self.options)
        return f"{self.name}: {self.kind}" + (f" {extra}" if extra else "")


class FieldSpecError(ValueError):
    pass


def parse_field_line(line: str) -> FieldSpec:
    match = _LINE.match(line.rstrip())
    if match is None:
        raise FieldSpecError(f"not a field declaration ('# field NAME: text|int|decimal|code [key=value ...]'): {line!r}")
    options = tuple(tuple(item.split("=", 1)) for item in match.group(3).split())
    spec = FieldSpec(match.group(1), match.group(2), options)  # type: ignore[arg-type]
    _annotation(spec)  # refuses unknown options and bad values now, at load time
    return spec


def contract_model(name: str, fields: list[FieldSpec]) -> type[BaseModel]:
    """The pydantic model of a template version's render data."""
    definitions: dict[str, Any] = {spec.name: (_annotation(spec), ...) for spec in fields}
    return create_model(  # type: ignore[call-overload, no-any-return]
        name, __config__=ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True), **definitions
    )


def validate_render_data(model: type[BaseModel], data: dict[str, Any]) -> list[tuple[str, str]]:
    """Problems with `data` as (field path, rule): never the value."""
    try:
        model.model_validate(data)
    except ValidationError as error:
        return [
            ("render_data." + ".".join(str(part) for part in item["loc"]), _rule(item))
            for item in error.errors(include_input=False, include_url=False)
        ]
    return []


def _rule(item: Any) -> str:
    if item["type"] == "value_error":
        return str(item["ctx"]["error"])
    if item["type"] == "missing":
        return "required by the template"
    if item["type"] == "extra_forbidden":
        return "not a field of the template"
    return str(item["msg"])


_ASCII_WHOLE_NUMBER = re.compile(r"-?[0-9]{1,18}")


def _ascii_whole_number(value: Any) -> Any:
    """Text for an int field must be ASCII digits: int() also reads Arabic-Indic digits ("٣"), "+5",
    " 5" and "5_000", and the template would then render a number the caller never wrote."""
    if isinstance(value, str) and not _ASCII_WHOLE_NUMBER.fullmatch(value):
        raise ValueError("must be a whole number written in ASCII digits, with an optional leading minus")
    return value


def _number_as_text(value: Any) -> Any:
    """A whole number given for a text field is its decimal text (what the template renders)."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _annotation(spec: FieldSpec) -> Any:
    allowed = {"text": {"max"}, "int": {"min", "max"}, "decimal": set(), "code": {"pattern", "max"}}[spec.kind]
    unknown = {key for key, _ in spec.options} - allowed
    if unknown:
        raise FieldSpecError(f"field {spec.name}: {spec.kind} takes no option {sorted(unknown)[0]!r}")
    try:
        if spec.kind == "int":
            low, high = spec.option("min"), spec.option("max")
            # "15" and 15 render the same bytes, and callers have sent both; any other spelling is refused.
            return Annotated[
                int, BeforeValidator(_ascii_whole_number), Field(ge=int(low) if low else None, le=int(high) if high else None)
            ]
        if spec.kind == "decimal":
            return Annotated[StrictStr, Field(pattern=_DECIMAL)]
        if spec.kind == "code":
            pattern = spec.option("pattern")
            if pattern is None:
                raise FieldSpecError(f"field {spec.name}: a code needs pattern=")
            re.compile(pattern)
            return Annotated[StrictStr, Field(pattern=pattern, max_length=int(spec.option("max") or DEFAULT_TEXT_MAX))]
        return Annotated[str, Field(max_length=int(spec.option("max") or DEFAULT_TEXT_MAX)), BeforeValidator(_number_as_text)]
    except (ValueError, re.error) as error:
        if isinstance(error, FieldSpecError):
            raise
        raise FieldSpecError(f"field {spec.name}: {error}") from None
