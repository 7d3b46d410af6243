"""A page's parameters, read strictly: each one the page takes at most once, nothing it does not take.

Every refusal is ``ParameterRefused``: the parameter's name and the rule, answered 400 on a page.
A value is never repeated in it (a value can be anything a caller typed, a phone number included).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# One line of printable text: no control characters (a NUL would reach PostgreSQL as an error).
_ONE_LINE = re.compile(r"[^\x00-\x1f\x7f]*")
# A name shown back in a refusal is cut short: it is the caller's to choose.
_NAME_SHOWN = 40


class ParameterRefused(ValueError):
    """A parameter the page cannot use; the message is `name: rule`."""

    def __init__(self, name: str, rule: str) -> None:
        self.name = name[:_NAME_SHOWN]
        self.rule = rule
        super().__init__(f"{self.name}: {rule}")


def only(given: Iterable[tuple[str, str]], takes: Iterable[str]) -> dict[str, str]:
    """The given parameters by name, each once and each one the page takes, values stripped; an
    empty value is as if it were not given (a form's empty field)."""
    allowed = sorted(takes)
    found: dict[str, str] = {}
    for name, value in given:
        if name not in allowed:
            listed = ", ".join(allowed) or "none"
            raise ParameterRefused(name, f"not a parameter of this page (it takes: {listed})")
        if name in found:
            raise ParameterRefused(name, "given more than once")
        found[name] = value.strip()
    return {name: value for name, value in found.items() if value}


def one_line(name: str, value: str, longest: int) -> str:
    """`value` when it is 1 to `longest` printable characters on one line."""
    if not (1 <= len(value) <= longest and _ONE_LINE.fullmatch(value)):
        raise ParameterRefused(name, f"must be 1 to {longest} characters on one line")
    return value
