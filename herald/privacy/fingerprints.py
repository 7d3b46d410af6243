"""Keyed fingerprints: how Herald names a person, or a payload, without naming them.

A plain SHA-256 of a phone number is no secret: there are about 10^10 numbers behind a country
code, and trying them all takes seconds (a 16-hex prefix printed by ``starter.py status`` gave a
number back in 1.3 s). So every fingerprint Herald writes is an HMAC-SHA-256 under a secret key,
written ``<key id>:<64 hex>``. Without the key, the fingerprint says nothing about the number.

The HMAC is taken over the SHA-256 of the canonical value, not over the value itself, so a
fingerprint written before keys existed (a bare SHA-256) can be re-keyed without the plaintext.

Rotation: the active key writes; every configured key is tried when looking up, and so are the
bare SHA-256 forms written before keyed fingerprints (migration 016), so consent, lifts and
cooldowns recorded earlier still count.

One person, one fingerprint: an e-mail address is canonicalised (local part lower-cased, domain in
its ASCII form) so ``Mixed.Case@Example.COM`` and ``mixed.case@example.com`` are one recipient for
suppression, consent, cooldowns and erasure; the message itself goes to the address as given. A
phone number is canonicalised by the doors' own function (``herald.core.recipients.sms_number``), so
``+1 (555) 260-0018`` and ``+15552600018`` are one person, and a spelling every door refuses
(``"+15552600018\\n"``) gets no fingerprint at all.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from email_validator import EmailNotValidError, validate_email

from herald.core.recipients import sms_number
from herald.privacy.key_sets import KeySet


def canonical_recipient(recipient: str) -> str:
    """The one form of a recipient that fingerprints and erasure compare.

    A phone number (no '@'): canonicalised here, by the same function every door uses
    (``herald.core.recipients.sms_number``: E.164), and refused (``RecipientRefused``, a ValueError)
    where the doors refuse it. Canonicalising inside rather than refusing what is not already E.164:
    a fingerprint is the person, so it must be the same whichever door, or caller that skipped
    one, computed it; a spelling no door accepts raises rather than becoming another person.

    An e-mail address: the local part lower-cased (every mailbox provider Herald sends to treats
    it without case, and a suppression or an erasure must not miss a person for a capital letter)
    and the domain in its ASCII (IDNA) form, lower-cased.
    """
    if "@" not in recipient:
        return sms_number(recipient)
    try:
        address = validate_email(recipient, check_deliverability=False)
    except EmailNotValidError:
        local, _, domain = recipient.rpartition("@")
        return f"{local.lower()}@{domain.lower()}"
    domain = address.ascii_domain or address.domain
    return f"{address.local_part.lower()}@{domain.lower()}"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


class Keyring(KeySet):
    """Fingerprint keys: id -> 32 random bytes; the active one writes, all of them find."""

    KIND = "fingerprint key"

    def _keyed(self, key_id: str, value: str) -> str:
        mac = hmac.new(self._keys[key_id], _digest(value).encode("ascii"), hashlib.sha256).hexdigest()
        return f"{key_id}:{mac}"

    def of_text(self, value: str) -> str:
        """The active key's fingerprint of any text (a canonical intent payload, say)."""
        return self._keyed(self._active, value)

    def matches_text(self, fingerprint: str, value: str) -> bool:
        """Whether `fingerprint` is this text's, under whichever key wrote it (or a bare SHA-256
        written before keys existed). A fingerprint under a key no longer held matches nothing."""
        key_id, colon, _ = fingerprint.partition(":")
        if not colon:
            return hmac.compare_digest(fingerprint, _digest(value))
        if key_id not in self._keys:
            return False
        return hmac.compare_digest(fingerprint, self._keyed(key_id, value))

    def recipient(self, recipient: str) -> str:
        """The fingerprint written for a recipient: the active key's, over the canonical form."""
        return self._keyed(self._active, canonical_recipient(recipient))

    def recipient_candidates(self, recipient: str) -> list[str]:
        """Every fingerprint this recipient may have been written under, for lookups and erasure:
        each key's, then the bare SHA-256 of the form given and of the canonical form (before 016)."""
        canonical = canonical_recipient(recipient)
        found = [self._keyed(self._active, canonical)]
        found += [self._keyed(key_id, canonical) for key_id in self._keys if key_id != self._active]
        for legacy in (_digest(recipient), _digest(canonical)):
            if legacy not in found:
                found.append(legacy)
        return found


def keyring_from(keys: Mapping[str, Any], active_key_id: str | None) -> Keyring:
    """A keyring from configured keys (bytes or SecretBytes); none is refused, never a quiet plain hash."""
    from herald.settings.variables import InvalidSetting

    keyring = Keyring.configured(keys, active_key_id)
    if keyring is None:
        raise InvalidSetting(
            "HERALD_FINGERPRINT_KEYS",
            "required: at least one id:base64key (32 random bytes), here or in HERALD_FINGERPRINT_KEY_FILES; "
            "without a key a fingerprint can be reversed by trying every number",
        )
    return keyring
