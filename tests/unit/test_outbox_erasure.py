"""The outbox erasure's comparison of a notice's spelling with the erased person's canonical form."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from herald.outbox.erasure import names
from herald.privacy.fingerprints import canonical_recipient
from tests.depth import examples

PROPERTY = settings(derandomize=True, database=None, max_examples=examples(2000), deadline=None)
_ATEXT = string.ascii_letters + string.digits + "!#$%&'*+-/=?^_`{|}~"
_LABEL = st.text(string.ascii_letters + string.digits + "-", min_size=1, max_size=10)


@st.composite
def ascii_addresses(draw: st.DrawFn) -> str:
    """Unquoted ASCII addresses, valid ones in mixed case (IDNA 'xn--' labels too) and odd ones."""
    if draw(st.booleans()):
        return draw(st.text(string.printable.replace('"', "").replace("\\", ""), min_size=1, max_size=30))
    local = ".".join(draw(st.lists(st.text(_ATEXT, min_size=1, max_size=8), min_size=1, max_size=3)))
    labels = draw(
        st.lists(st.one_of(_LABEL, st.sampled_from(["xn--bcher-kva", "XN--BCHER-KVA"])), min_size=1, max_size=3)
    )
    return f"{local}@{'.'.join(labels)}.{draw(st.sampled_from(['com', 'DE', 'Org']))}"


@PROPERTY
@given(spelling=ascii_addresses(), other=ascii_addresses())
def test_the_ascii_shortcut_agrees_with_the_canonical_form(spelling: str, other: str) -> None:
    """For an unquoted ASCII spelling, `names` answers exactly as comparing canonical forms does
    (a spelling that no door reads, and so has no canonical form, names no one)."""
    for canonical in (_canonical_or_none(spelling), _canonical_or_none(other)):
        if canonical is not None:
            assert names(spelling, canonical) is (_canonical_or_none(spelling) == canonical)


def _canonical_or_none(spelling: str) -> str | None:
    try:
        # A number's surrounding whitespace is taken off for erasure (see `names`).
        return canonical_recipient(spelling if "@" in spelling else spelling.strip())
    except ValueError:  # not a number by the doors' rule (herald.core.recipients)
        return None


def test_a_number_is_found_in_every_spelling_the_doors_read() -> None:
    """A notice written without enqueue may hold a number as typed: each spelling the doors read as the
    number names it, and so does one the relay refused for surrounding whitespace (it still holds the
    number); another number, and text that is no number, do not."""
    assert names("+1 (555) 123-0001", "+15551230001")
    assert names("\uff0b\uff11\uff15\uff15\uff15\uff11\uff12\uff13\uff10\uff10\uff10\uff11", "+15551230001")
    assert names("+15551230001", "+15551230001")
    assert names(" +15551230001\n", "+15551230001")
    assert not names("+1 555 123 0002", "+15551230001")
    assert not names("+15551230001 x12", "+15551230001")


def test_unicode_and_quoted_spellings_go_through_the_validator() -> None:
    """A Unicode domain, a capital in a Unicode local part and a quoted local part are found; another
    person, and text that is no address, are not."""
    assert names("Ana@Bücher.de", "ana@xn--bcher-kva.de")
    assert names("ÜLLA@example.com", "ülla@example.com")
    assert names('"Quoted"@Example.com', canonical_recipient('"Quoted"@Example.com'))
    assert not names("ana@bücher.de", "anna@xn--bcher-kva.de")
    assert not names("@@ü@@", "ana@xn--bcher-kva.de")
