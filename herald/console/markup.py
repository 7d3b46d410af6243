"""HTML built in Python with escaping by construction: `el` escapes every string it is given.

The console has no template engine: a page is a tree of ``el(tag, *children, **attributes)`` calls.
A child or an attribute value that is a plain ``str`` is escaped (``html.escape``); only ``Markup``,
which ``el`` itself returns, goes in as it is. So text from the ledger (a reason, a business key, an
operator's header) can never become markup, whatever it holds, unless code wraps it in ``Markup`` on
purpose, which nothing here does with ledger text.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

# Elements that take no children and no closing tag.
_VOID = frozenset({"br", "hr", "img", "input", "link", "meta", "col"})


class Markup(str):
    """Text that is already HTML (made by ``el`` or ``raw``): inserted as it is."""

    __slots__ = ()


def raw(text: str) -> Markup:
    """`text` as markup: for the page's own constant fragments only, never for anything read or received."""
    return Markup(text)


def _children(children: Iterable[Any]) -> str:
    parts: list[str] = []
    for child in children:
        if child is None or child is False:
            continue
        if isinstance(child, Markup):
            parts.append(child)
        elif isinstance(child, str):
            parts.append(html.escape(child, quote=False))
        elif isinstance(child, int | float):
            parts.append(html.escape(str(child), quote=False))
        else:  # a list, a tuple or a generator of children
            parts.append(_children(child))
    return "".join(parts)


def _attributes(attributes: dict[str, Any]) -> str:
    parts: list[str] = []
    for name, value in attributes.items():
        if value is None or value is False:
            continue
        # class_ and for_ are Python keywords; data_x is data-x.
        name = name.rstrip("_").replace("_", "-")
        parts.append(f" {name}" if value is True else f' {name}="{html.escape(str(value), quote=True)}"')
    return "".join(parts)


def el(tag: str, *children: Any, **attributes: Any) -> Markup:
    """``<tag attributes>children</tag>``, every string child and attribute value escaped."""
    opening = f"<{tag}{_attributes(attributes)}>"
    if tag in _VOID:
        return Markup(opening)
    return Markup(f"{opening}{_children(children)}</{tag}>")


def fragment(*children: Any) -> Markup:
    """Children side by side, with no element around them (escaped as ``el``'s)."""
    return Markup(_children(children))
