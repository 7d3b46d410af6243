"""Crypto-shredding: a recipient's number or address, bodies (an e-mail's HTML part too), subjects
and render data travel through Temporal sealed under a data key of their own, held in the ledger;
erasure deletes the key.

Temporal keeps every payload of a history until the namespace's retention ends (and an archive or
a backup keeps it longer), and the deployment's codec key opens all of them. So the client seals
the personal fields of an intent before it starts the workflow: each becomes a token
``sealed:1:<recipient fingerprint>:<base64url(nonce || AES-256-GCM ciphertext)>``, with the
fingerprint and the field's name bound as associated data. The workflow carries tokens only (its
input, every activity input, continue-as-new); the activities that must send, look up or record
open them with the key from ``recipient_keys``. ``erase_recipient`` deletes the key in the same
transaction that erases the ledger's copy, and from then on no payload of that person decodes
anywhere, whoever holds the codec key.

A value without the prefix is plaintext (histories written before sealing, a client without a
vault) and passes through unchanged, so old histories replay.
"""

from __future__ import annotations

import base64
import json
import os
import time
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from psycopg_pool import AsyncConnectionPool

from herald import fingerprints

if TYPE_CHECKING:
    from herald.intent import Intent
    from herald.ledger.records import LedgerBatch

PREFIX = "sealed:1:"
_NONCE_BYTES = 12
_KEY_BYTES = 32
# How long a process keeps a data key it read: an erasure reaches a busy worker within this.
CACHE_SECONDS = 60.0
_MAX_CACHED = 10_000
# The one render-data key of a sealed intent: not a render key (those start with a letter).
SEALED_RENDER_DATA = "_sealed"
# What erase_recipient() writes over a recipient (migration 013).
ERASED = "(erased)"


_READ = "SELECT data_key FROM recipient_keys WHERE recipient_fingerprint = %s"
_CREATE_OR_READ = """
WITH created AS (
    INSERT INTO recipient_keys (recipient_fingerprint, data_key) VALUES (%s, %s)
    ON CONFLICT (recipient_fingerprint) DO NOTHING RETURNING data_key)
SELECT data_key FROM created
UNION ALL
SELECT data_key FROM recipient_keys WHERE recipient_fingerprint = %s
LIMIT 1
"""


class RecipientErased(LookupError):
    """A sealed value whose data key is gone: the recipient was erased; it never decodes again."""

    def __init__(self, field: str) -> None:
        self.field = field
        super().__init__(f"{field}: sealed under an erased recipient's key; it cannot be read")


def is_sealed(value: str | None) -> bool:
    return value is not None and value.startswith(PREFIX)


def _aad(fingerprint: str, field: str) -> bytes:
    return f"{fingerprint}|{field}".encode()


class RecipientVault:
    """Seals and opens one recipient's fields with their data key (``recipient_keys``)."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self._cache: dict[str, tuple[bytes, float]] = {}

    @property
    def pool(self) -> AsyncConnectionPool:
        """The ledger the keys live in (a client starting intents also reads the send policy there)."""
        return self._pool

    async def _key(self, fingerprint: str, *, create: bool) -> bytes | None:
        cached = self._cache.get(fingerprint)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        async with self._pool.connection() as conn:
            # One statement either way (this is on every new recipient's send): the key inserted, or
            # the one already there. Two clients sealing for one new recipient at once: one key wins;
            # the loser's statement saw neither (its snapshot predates the winner's commit) and reads again.
            if create:
                cursor = await conn.execute(_CREATE_OR_READ, (fingerprint, os.urandom(_KEY_BYTES), fingerprint))
            else:
                cursor = await conn.execute(_READ, (fingerprint,))
            row = await cursor.fetchone()
            if row is None and create:
                row = await (await conn.execute(_READ, (fingerprint,))).fetchone()
        if row is None:
            self._cache.pop(fingerprint, None)
            return None
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        key = bytes(row[0])
        self._cache[fingerprint] = (key, time.monotonic() + CACHE_SECONDS)
        return key

    @staticmethod
    def _seal(key: bytes, fingerprint: str, field: str, value: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = AESGCM(key).encrypt(nonce, value.encode("utf-8"), _aad(fingerprint, field))
        return f"{PREFIX}{fingerprint}:{base64.urlsafe_b64encode(nonce + sealed).decode('ascii')}"

    async def seal_intent(self, intent: Intent) -> Intent:
        """The intent with recipient, body, HTML part, subject and render data sealed under the
        recipient's key (an intent already sealed as it is: a retried start must not seal twice)."""
        if is_sealed(intent.recipient):
            return intent
        fingerprint = intent.recipient_fingerprint or fingerprints.keyring().recipient(intent.recipient)
        key = await self._key(fingerprint, create=True)
        assert key is not None  # just created or found
        return intent.model_copy(
            update={
                "recipient_fingerprint": fingerprint,
                "recipient": self._seal(key, fingerprint, "recipient", intent.recipient),
                "body": self._seal(key, fingerprint, "body", intent.body),
                "subject": None if intent.subject is None else self._seal(key, fingerprint, "subject", intent.subject),
                # The same personal data as the body, escaped: sealed alike, so erasure reaches it.
                "html_body": None
                if intent.html_body is None
                else self._seal(key, fingerprint, "html_body", intent.html_body),
                # One token for all the values: fewer bytes in every payload that carries the intent.
                "render_data": {
                    SEALED_RENDER_DATA: self._seal(key, fingerprint, "render_data", json.dumps(intent.render_data))
                },
            }
        )

    async def open(self, value: str, field: str) -> str:
        """The plaintext of a sealed value (a plaintext value as it is); RecipientErased when its key
        is gone."""
        if not value.startswith(PREFIX):
            return value
        fingerprint, _, data = value[len(PREFIX) :].rpartition(":")
        key = await self._key(fingerprint, create=False)
        if key is None:
            raise RecipientErased(field)
        raw = base64.urlsafe_b64decode(data)
        return AESGCM(key).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _aad(fingerprint, field)).decode("utf-8")

    async def open_optional(self, value: str | None, field: str) -> str | None:
        return None if value is None else await self.open(value, field)

    async def open_intent(self, intent: Intent) -> Intent:
        """The intent as the ledger records it: every sealed field opened."""
        if not is_sealed(intent.recipient):
            return intent
        render_data = intent.render_data
        sealed_data = render_data.get(SEALED_RENDER_DATA)
        if isinstance(sealed_data, str) and len(render_data) == 1:
            render_data = json.loads(await self.open(sealed_data, "render_data"))
        return intent.model_copy(
            update={
                "recipient": await self.open(intent.recipient, "recipient"),
                "body": await self.open(intent.body, "body"),
                "subject": await self.open_optional(intent.subject, "subject"),
                "html_body": await self.open_optional(intent.html_body, "html_body"),
                "render_data": render_data,
            }
        )

    async def open_batch(self, batch: LedgerBatch) -> LedgerBatch:
        """A ledger batch whose intent row (if any) is opened, so the ledger holds plaintext it can erase."""
        if batch.record is None or not is_sealed(batch.record.intent.recipient):
            return batch
        intent = batch.record.intent
        try:
            opened = await self.open_intent(intent)
        except RecipientErased:
            # Erased before its first write: recorded as erase_recipient() leaves an intent.
            opened = intent.model_copy(
                update={"recipient": ERASED, "body": "", "subject": None, "html_body": None, "render_data": {}}
            )
        return batch.model_copy(update={"record": batch.record.model_copy(update={"intent": opened})})
