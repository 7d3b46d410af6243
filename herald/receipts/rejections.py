"""What a rejection keeps of a verified report it cannot store: every field, cut short and storable.

A rejected report broke a storage rule (a 10 KB value, a NUL byte). Its row in receipt_rejections
must itself be storable and small, yet still show an operator what came: each name and value is
cut to a bound, NUL is spelled out, and values that are not text are kept as their JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MAX_KEPT_NAME_CHARS = 64
MAX_KEPT_VALUE_CHARS = 256


def kept_fields(fields: Mapping[str, Any]) -> dict[str, str]:
    """A rejection's copy of the (already PII-free) fields."""
    return {
        cut_short(name, MAX_KEPT_NAME_CHARS): cut_short(value if isinstance(value, str) else json.dumps(value), MAX_KEPT_VALUE_CHARS)
        for name, value in fields.items()
    }


def cut_short(text: str, limit: int) -> str:
    cut = text[:limit].replace("\x00", "\\u0000")
    return cut + "…" if len(text) > limit else cut
