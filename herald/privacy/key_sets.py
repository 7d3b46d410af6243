"""Key sets: what every keyring of Herald is, whatever it keys.

Fingerprint keys (``herald.privacy.fingerprints``), payload keys (``herald.privacy.payload_codec``),
key-encryption keys (``herald.privacy.key_encryption``) and unsubscribe keys
(``herald.privacy.unsubscribe``) are each a ``KeySet``: 32 random bytes per id, one id active (it
writes, signs, wraps or encrypts; every key reads), shown by id only. Each checks its keys the same
way here; what it does with them is its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, Self

KEY_BYTES = 32
# An id travels beside what its key made (before the colon of a fingerprint, in a payload's
# metadata, in a token, in recipient_keys.kek_id): the settings' alphabet for ids, no separator.
KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class KeySet:
    """Keys by id, 32 random bytes each, one of them active; a key never reaches a log line."""

    # What the keys are, in a refusal ("fingerprint key").
    KIND: ClassVar[str] = "key"

    def __init__(self, keys: Mapping[str, bytes], active_key_id: str) -> None:
        if active_key_id not in keys:
            raise ValueError(f"the active {self.KIND} must be one of the keys")
        for key_id, key in keys.items():
            if not KEY_ID.fullmatch(key_id):
                raise ValueError(f"{self.KIND} id {key_id!r}: 1-64 letters, digits, '.', '_' or '-'")
            if len(key) != KEY_BYTES:
                raise ValueError(f"{self.KIND} {key_id!r}: must be {KEY_BYTES} bytes, not {len(key)}")
        self._keys = {key_id: bytes(key) for key_id, key in keys.items()}
        self._active = active_key_id

    @classmethod
    def configured(cls, keys: Mapping[str, Any], active_key_id: str | None) -> Self | None:
        """The set of a settings section's keys (SecretBytes or bytes), the first one active unless
        one is named; None when there is none (whether that is refused is the caller's to say)."""
        if not keys:
            return None
        plain = {key_id: key if isinstance(key, bytes) else key.get_secret_value() for key_id, key in keys.items()}
        return cls(plain, active_key_id or next(iter(plain)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(active={self._active!r}, ids={sorted(self._keys)!r})"

    @property
    def active_key_id(self) -> str:
        return self._active

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(self._keys)
