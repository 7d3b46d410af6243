"""Keyed fingerprints (herald/privacy/fingerprints.py): one person one fingerprint, worthless without the key.

The review reversed a number from the 16-hex prefix `starter.py status` printed (plain SHA-256) by
trying every +1555xxxxxxx in 1.3 s, and erasing mixed.case@example.com missed the intents sent to
Mixed.Case@Example.COM.
"""

from __future__ import annotations

import hashlib
import secrets

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herald.core.recipients import RecipientRefused, short
from herald.privacy.fingerprints import Keyring, canonical_recipient, keyring_from
from herald.settings.variables import InvalidSetting

KEY_A = secrets.token_bytes(32)
KEY_B = secrets.token_bytes(32)


def test_spellings_of_one_address_are_one_recipient() -> None:
    ring = Keyring({"a": KEY_A}, "a")
    spellings = ["Mixed.Case@Example.COM", "mixed.case@example.com", "MIXED.CASE@EXAMPLE.com"]
    assert {canonical_recipient(s) for s in spellings} == {"mixed.case@example.com"}
    assert len({ring.recipient(s) for s in spellings}) == 1
    # An internationalised domain is compared in its ASCII form.
    assert canonical_recipient("Anna@Bücher.DE") == canonical_recipient("anna@xn--bcher-kva.de")
    # Two numbers never collide; two spellings of one number are one (herald.core.recipients).
    assert ring.recipient("+15551230001") != ring.recipient("+15551230002")
    assert ring.recipient("+1 (555) 123-0001") == ring.recipient("+15551230001")


def test_a_brute_force_over_numbers_without_the_key_finds_nothing() -> None:
    """What the review did, tried here: every number of a 10,000-number block, hashed as before.
    Against the plain prefix it finds the number; against the keyed prefix it finds none."""
    ring = Keyring({"a": KEY_A}, "a")
    number = "+15551234567"
    plain_prefix = hashlib.sha256(number.encode()).hexdigest()[:16]
    keyed_prefix = short(ring.recipient(number))
    block = [f"+1555123{n:04d}" for n in range(10_000)]
    assert [n for n in block if hashlib.sha256(n.encode()).hexdigest()[:16] == plain_prefix] == [number]
    assert [n for n in block if hashlib.sha256(n.encode()).hexdigest()[:16] == keyed_prefix] == []
    # With another key (an attacker's guess), the prefixes share nothing either.
    guess = Keyring({"a": secrets.token_bytes(32)}, "a")
    assert [n for n in block if short(guess.recipient(n)) == keyed_prefix] == []


def test_rotation_keeps_finding_what_older_keys_and_plain_hashes_wrote() -> None:
    before = Keyring({"a": KEY_A}, "a")
    after = Keyring({"a": KEY_A, "b": KEY_B}, "b")
    recipient = "+15551230003"
    written_before = before.recipient(recipient)
    candidates = after.recipient_candidates(recipient)
    assert candidates[0] == after.recipient(recipient) and candidates[0].startswith("b:")
    assert written_before in candidates
    assert hashlib.sha256(recipient.encode()).hexdigest() in candidates  # rows from before migration 016
    # A payload fingerprint under the old key still matches; under a key no longer held, nothing does.
    assert after.matches_text(before.of_text("payload"), "payload")
    assert not Keyring({"b": KEY_B}, "b").matches_text(before.of_text("payload"), "payload")
    assert after.matches_text(hashlib.sha256(b"payload").hexdigest(), "payload")
    assert not after.matches_text(before.of_text("payload"), "another payload")


def test_no_key_is_refused_by_name_never_a_quiet_plain_hash() -> None:
    with pytest.raises(InvalidSetting) as refused:
        keyring_from({}, None)
    assert refused.value.name == "HERALD_FINGERPRINT_KEYS"


def test_a_keyring_never_prints_its_keys() -> None:
    ring = Keyring({"a": KEY_A}, "a")
    assert KEY_A.hex() not in repr(ring) and "a" in repr(ring)


@given(st.text(max_size=80))
def test_canonical_form_answers_or_refuses_and_is_stable(value: str) -> None:
    """Whatever reaches it, canonicalising answers or refuses by the doors' rule (no spelling the doors
    refuse gets a fingerprint of its own), and twice is once."""
    try:
        once = canonical_recipient(value)
    except RecipientRefused:
        assert "@" not in value  # a number's rule; an address that fails validation is still compared
        return
    assert canonical_recipient(once) == once
