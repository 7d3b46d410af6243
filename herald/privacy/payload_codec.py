"""AES-256-GCM encryption of every payload Herald hands to Temporal.

A recipient's number or address and the rendered body travel as workflow and activity input, and
Temporal keeps every input in the workflow's history. This codec encrypts each payload on its way
to the server and decrypts it on its way back, so the server (and anyone reading its database,
its Web UI or `temporal workflow show`) holds ciphertext only.

One encoded payload::

    metadata  encoding=binary/encrypted, encryption-key-id=<id>
    data      nonce (12 random bytes) || AES-256-GCM(original Payload serialized, aad=<id>)

The whole original Payload is the plaintext, its metadata included, so the encoding it was written
with (`json/plain`, `binary/null`, ...) comes back intact. The key id is the associated data: a
payload whose metadata is edited to name another key fails authentication instead of decrypting
under it.

Keys rotate by adding one: the active key encrypts, every key in the ring decrypts, so histories
written under an old key stay readable while it is kept. Payloads without `binary/encrypted` pass
through decode untouched, so histories written before encryption was switched on still replay.

Decode fails with ``UnknownKey`` (the ring lacks the payload's key id) or ``Undecryptable`` (the
key is there, the payload does not authenticate under it: tampered, truncated, or a different key
under a reused id). Both messages name the key id and nothing of the content.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from herald.privacy.key_sets import KeySet

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
# GCM's standard nonce size. With random nonces NIST SP 800-38D allows 2^32 encryptions per key:
# an intent writes a few dozen payloads, so rotate a key before it has served ~100 million intents.
NONCE_BYTES = 12


class CodecError(ValueError):
    """A payload this codec cannot decode; the message names the key id, never the content."""

    def __init__(self, key_id: str, rule: str) -> None:
        self.key_id = key_id
        # repr() escapes control characters, and the cut bounds a forged id: metadata is untrusted.
        super().__init__(f"encrypted payload, key id {key_id[:64]!r}: {rule}")


class UnknownKey(CodecError):
    """The payload names a key id this keyring does not hold."""


class Undecryptable(CodecError):
    """The key is held, but the payload does not authenticate under it."""


class EncryptionCodec(KeySet, PayloadCodec):
    """Encrypts with the active key; decrypts with whichever key of the ring the payload names."""

    KIND = "payload key (AES-256)"

    def __init__(self, keys: Mapping[str, bytes], active_key_id: str) -> None:
        super().__init__(keys, active_key_id)
        self._ciphers = {key_id: AESGCM(key) for key_id, key in self._keys.items()}

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(payload) for payload in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        key_id = self.active_key_id
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[key_id].encrypt(nonce, payload.SerializeToString(), key_id.encode())
        return Payload(metadata={"encoding": ENCODING, KEY_ID_METADATA: key_id.encode()}, data=nonce + sealed)

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # written before encryption, or never encoded (search attributes)
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode("utf-8", "replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise UnknownKey(key_id, f"no such key in this keyring (held: {', '.join(sorted(self._ciphers))})")
        nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        try:
            return Payload.FromString(cipher.decrypt(nonce, sealed, key_id.encode()))
        except InvalidTag:
            raise Undecryptable(key_id, "does not authenticate (tampered, truncated, or another key under this id)") from None


def payloads_in(messages: Iterable[Message]) -> list[Payload]:
    """Every Payload inside protobuf messages (history events, say), depth first.

    The payloads are the messages' own objects: ``CopyFrom`` on one edits the history in place,
    which is how ``decode_in_place`` turns a fetched history readable.
    """
    found: list[Payload] = []

    def walk(message: Message) -> None:
        if isinstance(message, Payload):
            found.append(message)
            return
        for _field, value in message.ListFields():
            if isinstance(value, Message):
                walk(value)
            elif hasattr(value, "values"):  # a map; its values may be messages (memo, header)
                for item in value.values():
                    if isinstance(item, Message):
                        walk(item)
            elif isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
                for item in value:
                    if isinstance(item, Message):
                        walk(item)

    for message in messages:
        walk(message)
    return found


async def decode_in_place(messages: Iterable[Message], codec: PayloadCodec | None) -> None:
    """Replace every payload inside `messages` by its decoded form (a history for a test or a report)."""
    if codec is None:
        return
    found = payloads_in(messages)
    for payload, decoded in zip(found, await codec.decode(found), strict=True):
        if decoded is not payload:  # plaintext passes through as the very same object
            payload.CopyFrom(decoded)
