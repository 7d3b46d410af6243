"""Key-encryption keys (KEKs): the ledger holds recipient data keys wrapped, never in the clear.

A data key (herald/privacy/recipient_vault.py) opens every sealed payload of one person. Kept in the clear
in ``recipient_keys``, a disk image, a base backup or a WAL archive of the ledger keeps it after
``erase_recipient`` deleted the row: deleting it there is not deleting it. So each data key is
stored wrapped (AES-256-GCM) under a KEK the database never holds, bound as associated data to the
recipient's fingerprint and the data key's own id; a copy of the ledger alone opens nothing, and
once a row is deleted, the copies the database keeps of it are ciphertext under a key it never had.

    KeyWrapper ....... the interface: wrap under the active KEK, unwrap by the KEK id the row names.
                       A KMS implements it (AWS KMS Encrypt/Decrypt with an encryption context,
                       Google Cloud KMS with additional authenticated data, Vault's transit engine);
                       the local implementation below reads key files.
    LocalKeks ........ KEKs from HERALD_KEY_ENCRYPTION_KEY_FILES (or _KEYS): ``id:base64key`` lines,
                       32 random bytes each; the active one wraps, every one unwraps.

Rotation: add the new KEK, make it active, keep the old ones: new data keys are wrapped under the
new KEK, rows wrapped before still unwrap under theirs. ``python -m herald.jobs.rewrap_keys``
wraps every older row (and every clear key written before migration 020) under the active KEK;
after it, an old KEK can be removed.

Errors: ``KeyUnavailable`` when a row names a KEK this process does not hold, or does not unwrap
under the one it names (a configuration to fix, never the person's erasure): the message names the
KEK id and the variable, never a key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from herald.privacy.key_sets import KeySet

_NONCE_BYTES = 12
KEY_FILES_VARIABLE = "HERALD_KEY_ENCRYPTION_KEY_FILES"


class KeyUnavailable(RuntimeError):
    """A wrapped data key this process cannot unwrap: its KEK is not configured here, or is not the
    one that wrapped it. Nothing about the recipient: retry once the KEKs are configured."""

    def __init__(self, kek_id: str, why: str) -> None:
        self.kek_id = kek_id
        super().__init__(f"recipient data key wrapped under key-encryption key {kek_id!r}: {why} ({KEY_FILES_VARIABLE})")


class KeyWrapper(Protocol):
    """Wraps and unwraps recipient data keys by KEK id; `context` (the fingerprint and the data key's
    id) is bound to the wrap, so a wrapped key moved to another row does not unwrap."""

    @property
    def active_id(self) -> str:
        """The KEK new data keys are wrapped under."""
        ...

    async def wrap(self, key: bytes, context: bytes) -> tuple[str, bytes]:
        """(the KEK id, `key` wrapped under it)."""
        ...

    async def unwrap(self, kek_id: str, wrapped: bytes, context: bytes) -> bytes:
        """The data key; KeyUnavailable when `kek_id` is not held or does not open `wrapped`."""
        ...


class LocalKeks(KeySet):
    """KEKs held by this process (from key files): id -> 32 random bytes; the active one wraps."""

    KIND = "key-encryption key"

    def __init__(self, keys: Mapping[str, bytes], active_id: str) -> None:
        super().__init__(keys, active_id)
        self._ciphers = {kek_id: AESGCM(key) for kek_id, key in self._keys.items()}

    @property
    def active_id(self) -> str:
        return self.active_key_id

    async def wrap(self, key: bytes, context: bytes) -> tuple[str, bytes]:
        nonce = os.urandom(_NONCE_BYTES)
        return self._active, nonce + self._ciphers[self._active].encrypt(nonce, key, context)

    async def unwrap(self, kek_id: str, wrapped: bytes, context: bytes) -> bytes:
        kek = self._ciphers.get(kek_id)
        if kek is None:
            raise KeyUnavailable(kek_id, "not configured on this process")
        try:
            return kek.decrypt(wrapped[:_NONCE_BYTES], wrapped[_NONCE_BYTES:], context)
        except InvalidTag:
            raise KeyUnavailable(kek_id, "the configured key of that id does not unwrap it") from None


def from_settings(settings: Any) -> LocalKeks:
    """The KEKs a process's Settings name; none is refused, naming the variable."""
    return from_section(settings.key_encryption)


def from_section(section: Any) -> LocalKeks:
    """The KEKs of a KeyEncryptionSettings; none is refused, naming the variable (a vault without a
    KEK would write keys that a copy of the database opens)."""
    from herald.settings.variables import InvalidSetting

    keks = LocalKeks.configured(section.keys, section.active_key)
    if keks is None:
        raise InvalidSetting(
            KEY_FILES_VARIABLE,
            "required where recipients' data keys are made or read (clients with DATABASE_URL, workers): "
            "a file of id:base64key lines (32 random bytes), or HERALD_KEY_ENCRYPTION_KEYS",
        )
    return keks
