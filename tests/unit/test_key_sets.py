"""Every keyring of Herald checks its keys one way (herald/privacy/key_sets.py): fingerprint, payload,
key-encryption and unsubscribe keys alike."""

from __future__ import annotations

import base64
import secrets

import pytest
from pydantic import SecretBytes

from herald.privacy.fingerprints import Keyring
from herald.privacy.key_encryption import LocalKeks
from herald.privacy.key_sets import KeySet
from herald.privacy.payload_codec import EncryptionCodec
from herald.privacy.unsubscribe import TokenKeys

KEY = secrets.token_bytes(32)
SETS: list[type[KeySet]] = [Keyring, EncryptionCodec, LocalKeks, TokenKeys]


@pytest.mark.parametrize("kind", SETS, ids=lambda kind: kind.__name__)
def test_a_keyring_refuses_what_no_keyring_takes_and_shows_ids_only(kind: type[KeySet]) -> None:
    """An active id it does not hold, a key of another length, an id with a separator in it: each
    refused naming the id, never the key; a keyring shows its ids and never its keys."""
    refusals = [({"a": KEY}, "b", "must be one of the keys"), ({"a": KEY[:16]}, "a", "must be 32 bytes, not 16"),
                ({"a:b": KEY}, "a:b", "'a:b': 1-64 letters")]  # fmt: skip
    for keys, active, rule in refusals:
        with pytest.raises(ValueError, match=rule) as refused:
            kind(keys, active)
        assert KEY.hex() not in str(refused.value) and base64.b64encode(KEY).decode() not in str(refused.value)
    ring = kind({"a": KEY, "b": secrets.token_bytes(32)}, "b")
    assert ring.active_key_id == "b" and ring.ids == {"a", "b"}
    assert repr(ring) == f"{kind.__name__}(active='b', ids=['a', 'b'])"


@pytest.mark.parametrize("kind", SETS, ids=lambda kind: kind.__name__)
def test_configured_keys_make_a_keyring_with_the_first_active_unless_one_is_named(kind: type[KeySet]) -> None:
    """A settings section's keys (SecretBytes) make the keyring, the first active unless one is named;
    no keys make none, for the caller to refuse or to run without."""
    keys = {"first": SecretBytes(KEY), "second": SecretBytes(secrets.token_bytes(32))}
    first, named = kind.configured(keys, None), kind.configured(keys, "second")
    assert first is not None and first.active_key_id == "first"
    assert named is not None and named.active_key_id == "second"
    assert kind.configured({}, None) is None
