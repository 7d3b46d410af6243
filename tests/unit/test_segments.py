"""SMS segment counts against a reference table at every boundary (3GPP TS 23.038 / 23.040)."""

from __future__ import annotations

import pytest

from herald.core.segments import Encoding, count_segments

E = Encoding

REFERENCE = [
    # body, encoding, segments, units
    ("", E.GSM7, 1, 0),
    ("a" * 160, E.GSM7, 1, 160),
    ("a" * 161, E.GSM7, 2, 161),
    ("a" * 306, E.GSM7, 2, 306),
    ("a" * 307, E.GSM7, 3, 307),
    ("a" * 459, E.GSM7, 3, 459),
    ("a" * 460, E.GSM7, 4, 460),
    # Extension characters count twice: 80 euro signs are 160 septets, one more is two segments.
    ("€" * 80, E.GSM7, 1, 160),
    ("€" * 80 + "a", E.GSM7, 2, 161),
    ("a" * 159 + "€", E.GSM7, 2, 161),
    # An escape pair never straddles a part: 152 + one € (2) cannot fit 153, so it opens part 2.
    ("a" * 152 + "€" + "a" * 152, E.GSM7, 3, 306),
    ("{}[]~^\\|", E.GSM7, 1, 16),
    ("£¥èÄÖÑÜ§¿äöñüà", E.GSM7, 1, 14),
    # One character outside GSM-7 makes the whole body UCS-2.
    ("é" * 70, E.GSM7, 1, 70),
    ("ç" * 70, E.UCS2, 1, 70),
    ("ç" * 71, E.UCS2, 2, 71),
    ("ç" * 134, E.UCS2, 2, 134),
    ("ç" * 135, E.UCS2, 3, 135),
    ("a" * 69 + "ç", E.UCS2, 1, 70),
    ("Привет", E.UCS2, 1, 6),
    # Emoji outside the BMP are two code units each, never split across parts.
    ("😀" * 35, E.UCS2, 1, 70),
    ("😀" * 35 + "a", E.UCS2, 2, 71),
    ("a" * 66 + "😀" + "a" * 66, E.UCS2, 3, 134),
    # The example: 1,546 emoji are 3,092 code units, 47 parts of 67 (46 of them full).
    ("😀" * 1546, E.UCS2, 47, 3092),
]


@pytest.mark.parametrize("body,encoding,segments,units", REFERENCE, ids=[f"{len(r[0])}-{r[1].value}-{r[2]}" for r in REFERENCE])
def test_segments_match_the_reference(body: str, encoding: Encoding, segments: int, units: int) -> None:
    counted = count_segments(body)
    assert (counted.encoding, counted.segments, counted.units) == (encoding, segments, units)


def test_a_count_describes_itself_for_errors_and_previews() -> None:
    assert count_segments("a" * 161).describe() == "2 segments (GSM-7, 161 septets)"
    assert count_segments("ç").describe() == "1 segment (UCS-2, 1 UTF-16 code unit)"
