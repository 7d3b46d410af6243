"""SMS segments counted as carriers count them (3GPP TS 23.038 and 23.040).

A body that fits the GSM 7-bit default alphabet travels in septets: 160 in a single message, 153
per part once it needs a concatenation header. Each character of the extension table (``€ { } [
] ~ ^ \\ |`` and form feed) is an escape plus a septet, so it counts twice, and a part never ends
between the two. Anything else forces UCS-2 for the whole body: 70 UTF-16 code units in a single
message, 67 per part; a character outside the Basic Multilingual Plane (most emoji) is a surrogate
pair, two code units, never split across parts.

Pure functions only: the template registry uses them to refuse a body over its segment limit
before anything is sent, and the ledger records the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# The GSM 03.38 default alphabet, without ESC (0x1B), which only introduces the extension table.
_GSM7_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
_GSM7_EXTENSION = frozenset("\f^{}\\[~]|€")

GSM7_SINGLE, GSM7_PART = 160, 153
UCS2_SINGLE, UCS2_PART = 70, 67


class Encoding(str, Enum):
    GSM7 = "GSM-7"
    UCS2 = "UCS-2"


@dataclass(frozen=True)
class SegmentCount:
    encoding: Encoding
    segments: int
    units: int  # septets (GSM-7) or UTF-16 code units (UCS-2)

    def describe(self) -> str:
        unit = "septet" if self.encoding is Encoding.GSM7 else "UTF-16 code unit"
        plural = {True: "s", False: ""}
        return (
            f"{self.segments} segment{plural[self.segments != 1]} "
            f"({self.encoding.value}, {self.units} {unit}{plural[self.units != 1]})"
        )


def count_segments(body: str) -> SegmentCount:
    """How many SMS segments `body` costs, and in which encoding."""
    if all(char in _GSM7_BASIC or char in _GSM7_EXTENSION for char in body):
        costs = [2 if char in _GSM7_EXTENSION else 1 for char in body]
        return _packed(Encoding.GSM7, costs, GSM7_SINGLE, GSM7_PART)
    costs = [2 if ord(char) > 0xFFFF else 1 for char in body]
    return _packed(Encoding.UCS2, costs, UCS2_SINGLE, UCS2_PART)


def _packed(encoding: Encoding, costs: list[int], single: int, part: int) -> SegmentCount:
    """Fill parts greedily: a character's units (an escape pair, a surrogate pair) stay together."""
    units = sum(costs)
    if units <= single:
        return SegmentCount(encoding, 1, units)
    segments, used = 1, 0
    for cost in costs:
        if used + cost > part:
            segments, used = segments + 1, 0
        used += cost
    return SegmentCount(encoding, segments, units)
