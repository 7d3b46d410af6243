"""Crypto-shredding: a recipient's number or address, bodies (an e-mail's HTML part too), subjects
and render data travel through Temporal sealed under a data key of their own, held in the ledger
wrapped under a key-encryption key (herald/privacy/key_encryption.py); erasure deletes the key.

Temporal keeps every payload of a history until the namespace's retention ends (and an archive or
a backup keeps it longer), and the deployment's codec key opens all of them. So the client seals
the personal fields of an intent before it starts the workflow: each becomes a token
``sealed:2:<recipient fingerprint>:<key id>:<base64url(nonce || AES-256-GCM ciphertext)>``, with the
fingerprint, the key id and the field's name bound as associated data. The workflow carries tokens
only (its input, every activity input, continue-as-new); the activities that must send, look up or
record open them with the key from ``recipient_keys``. ``erase_recipient`` deletes the key in the
same transaction that erases the ledger's copy, and from then on no payload of that person decodes
anywhere, whoever holds the codec key.

Keys follow an erasure at once. A person erased and then sent to again gets a new key, a new
*generation* with an id of its own, and every token names the generation that sealed it:

    seal ....... reads the ledger's key row on every seal (one indexed read, at the client, once per
                 intent) and seals under the generation the ledger holds, making one when there is
                 none: never under a key remembered from before an erasure.
    open ....... reads the row once per activity (``opening()``): no row, or a row of another key id,
                 means the token's generation was erased (``RecipientErased``), before any key is
                 tried; a tag failure under the named generation re-reads the row before deciding,
                 and fails only then, as ``SealedValueCorrupt``.
    cache ...... only unwrapped keys, by (fingerprint, key id), for CACHE_SECONDS: an id names one
                 key forever, so a cached key is never another generation's; the cache spares the
                 KEK (a KMS call) and the ledger is still asked whether that generation is current.

Tokens written before key ids (``sealed:1:``, no id) still open, so old histories replay: under
a row whose id migration 020 gave (``v1.``...), the generations that sealed them; under a row
made since, they belong to an erased generation.

A value without either prefix is plaintext (histories written before sealing, a client without a
vault) and passes through unchanged.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from psycopg_pool import AsyncConnectionPool

from herald.core.message import Message
from herald.privacy.key_encryption import KeyWrapper

if TYPE_CHECKING:
    from herald.core.intent import Intent
    from herald.core.rows import LedgerBatch

PREFIX = "sealed:2:"
# Tokens sealed before key ids: no id; their AAD binds the fingerprint and field only.
LEGACY_PREFIX = "sealed:1:"
# How migration 020 named the key generations already in the ledger: those sealed `sealed:1:` tokens.
LEGACY_KEY_ID = "v1."
_NONCE_BYTES = 12
_TAG_BYTES = 16  # AES-GCM's authentication tag, at the end of every ciphertext
_KEY_BYTES = 32
# 48 random bits, 8 base64url characters in every token: ids only tell one person's generations apart.
_KEY_ID_BYTES = 6
# How long a process keeps a data key it unwrapped (never whether it is current: the ledger says that).
CACHE_SECONDS = 60.0
_MAX_CACHED = 10_000
# The one render-data key of a sealed intent: not a render key (those start with a letter).
SEALED_RENDER_DATA = "_sealed"
# What erase_recipient() writes over a recipient (migration 013).
ERASED = "(erased)"


_READ = "SELECT key_id, data_key, wrapped_key, kek_id FROM recipient_keys WHERE recipient_fingerprint = %s"
_CREATE_OR_READ = """
WITH created AS (
    INSERT INTO recipient_keys (recipient_fingerprint, key_id, wrapped_key, kek_id) VALUES (%s, %s, %s, %s)
    ON CONFLICT (recipient_fingerprint) DO NOTHING RETURNING key_id, data_key, wrapped_key, kek_id)
SELECT * FROM created
UNION ALL
SELECT key_id, data_key, wrapped_key, kek_id FROM recipient_keys WHERE recipient_fingerprint = %s
LIMIT 1
"""


class RecipientErased(LookupError):
    """A sealed value whose key generation the ledger no longer holds: the recipient was erased
    (and may have come back under a new key); it never decodes again."""

    def __init__(self, field: str) -> None:
        self.field = field
        super().__init__(f"{field}: sealed under an erased recipient's key (recipient erased); it cannot be read")


class SealedValueCorrupt(InvalidTag):
    """A sealed value that does not open under the very key generation it names, read afresh from
    the ledger: altered, or opened as another field than the one it was sealed as."""

    def __init__(self, field: str) -> None:
        self.field = field
        super().__init__(f"{field}: sealed value does not open under the key it names (altered or misplaced)")


# Every way a token may refuse to open for good: an activity ends the attempt refused, naming it.
UNOPENABLE = (RecipientErased, SealedValueCorrupt)


@dataclass(frozen=True)
class KeyRow:
    """One row of ``recipient_keys``: a generation's id and its key, wrapped (or, before 020, clear)."""

    key_id: str
    data_key: bytes | None = None
    wrapped_key: bytes | None = None
    kek_id: str | None = None


class KeyRows(Protocol):
    """Where key rows live: the ledger's ``recipient_keys`` (a unit test holds them in memory)."""

    async def read(self, fingerprint: str, *, timeout: float | None = None) -> KeyRow | None: ...

    async def create(self, fingerprint: str, row: KeyRow) -> KeyRow | None:
        """`row` inserted, or the row another process inserted first (None: that one was erased at once)."""
        ...


class LedgerKeyRows:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def read(self, fingerprint: str, *, timeout: float | None = None) -> KeyRow | None:
        async with self._pool.connection(timeout=timeout) as conn:
            return _row(await (await conn.execute(_READ, (fingerprint,))).fetchone())

    async def create(self, fingerprint: str, row: KeyRow) -> KeyRow | None:
        async with self._pool.connection() as conn:
            # One statement: the key inserted, or the one already there. Two clients sealing for one
            # new recipient at once: one key wins; the loser's statement saw neither (its snapshot
            # predates the winner's commit) and reads again.
            args = (fingerprint, row.key_id, row.wrapped_key, row.kek_id, fingerprint)
            found = _row(await (await conn.execute(_CREATE_OR_READ, args)).fetchone())
            if found is None:
                found = _row(await (await conn.execute(_READ, (fingerprint,))).fetchone())
        return found


def _row(found: tuple[object, ...] | None) -> KeyRow | None:
    if found is None:
        return None
    key_id, data_key, wrapped_key, kek_id = found
    return KeyRow(
        key_id=str(key_id),
        data_key=None if data_key is None else bytes(data_key),  # type: ignore[arg-type]
        wrapped_key=None if wrapped_key is None else bytes(wrapped_key),  # type: ignore[arg-type]
        kek_id=None if kek_id is None else str(kek_id),
    )


@dataclass(frozen=True)
class _Token:
    fingerprint: str
    key_id: str | None  # None: a `sealed:1:` token
    data: str

    def aad(self, field: str) -> bytes:
        return _aad(self.fingerprint, self.key_id, field)


def _parse(value: str) -> _Token | None:
    if value.startswith(PREFIX):
        head, _, data = value[len(PREFIX) :].rpartition(":")
        fingerprint, _, key_id = head.rpartition(":")
        return _Token(fingerprint, key_id, data)
    if value.startswith(LEGACY_PREFIX):
        fingerprint, _, data = value[len(LEGACY_PREFIX) :].rpartition(":")
        return _Token(fingerprint, None, data)
    return None


def is_sealed(value: str | None) -> bool:
    return value is not None and (value.startswith(PREFIX) or value.startswith(LEGACY_PREFIX))


def _aad(fingerprint: str, key_id: str | None, field: str) -> bytes:
    return (f"{fingerprint}|{field}" if key_id is None else f"{fingerprint}|{key_id}|{field}").encode()


def wrap_context(fingerprint: str, key_id: str) -> bytes:
    """What a wrapped key is bound to: a wrapped key copied to another row or generation does not unwrap."""
    return f"recipient_keys|{fingerprint}|{key_id}".encode()


def _current(token: _Token, row: KeyRow | None) -> bool:
    """Whether `row` is the generation that sealed `token`."""
    if row is None:
        return False
    if token.key_id is None:
        return row.key_id.startswith(LEGACY_KEY_ID)
    return row.key_id == token.key_id


class RecipientVault:
    """Seals and opens recipients' fields with their data keys (``recipient_keys``, wrapped under
    `keks`, the process's key-encryption keys: ``herald.runtime`` builds them from the settings)."""

    def __init__(self, pool: AsyncConnectionPool, keks: KeyWrapper, *, rows: KeyRows | None = None) -> None:
        self._pool = pool
        self._keks = keks
        self._rows = rows if rows is not None else LedgerKeyRows(pool)
        self._cache: dict[tuple[str, str], tuple[bytes, float]] = {}

    @property
    def pool(self) -> AsyncConnectionPool:
        """The ledger the keys live in (a client starting intents also reads the send policy there)."""
        return self._pool

    @property
    def rows(self) -> KeyRows:
        return self._rows

    async def unwrapped(self, fingerprint: str, row: KeyRow) -> bytes:
        """The data key of `row`, unwrapped (or cached from an earlier unwrap of the same generation)."""
        if row.data_key is not None:
            return row.data_key  # written before 020, not yet re-wrapped
        cached = self._cache.get((fingerprint, row.key_id))
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        assert row.wrapped_key is not None and row.kek_id is not None  # recipient_keys_one_form
        key = await self._keks.unwrap(row.kek_id, row.wrapped_key, wrap_context(fingerprint, row.key_id))
        self._remember(fingerprint, row.key_id, key)
        return key

    def _remember(self, fingerprint: str, key_id: str, key: bytes) -> None:
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        self._cache[(fingerprint, key_id)] = (key, time.monotonic() + CACHE_SECONDS)

    def forget(self, fingerprint: str, key_id: str) -> None:
        self._cache.pop((fingerprint, key_id), None)

    async def _sealing_key(self, fingerprint: str) -> tuple[str, bytes]:
        """The generation the ledger holds for `fingerprint` now (a new one when it holds none)."""
        row = await self._rows.read(fingerprint)
        while row is None:  # again only if another process's new key was erased between two statements
            key_id, key = secrets.token_urlsafe(_KEY_ID_BYTES), os.urandom(_KEY_BYTES)
            kek_id, wrapped = await self._keks.wrap(key, wrap_context(fingerprint, key_id))
            row = await self._rows.create(fingerprint, KeyRow(key_id=key_id, wrapped_key=wrapped, kek_id=kek_id))
            if row is not None and row.key_id == key_id:
                self._remember(fingerprint, key_id, key)
                return key_id, key
        return row.key_id, await self.unwrapped(fingerprint, row)

    @staticmethod
    def _seal(key: bytes, fingerprint: str, key_id: str, field: str, value: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = AESGCM(key).encrypt(nonce, value.encode("utf-8"), _aad(fingerprint, key_id, field))
        return f"{PREFIX}{fingerprint}:{key_id}:{base64.urlsafe_b64encode(nonce + sealed).decode('ascii')}"

    async def seal_intent(self, intent: Intent) -> Intent:
        """The intent with its message's personal fields (``Message.PERSONAL``) and its render data
        sealed under the recipient's key (an intent already sealed as it is: a retried start must
        not seal twice)."""
        message = intent.message
        if is_sealed(message.recipient):
            return intent
        fingerprint = intent.recipient_fingerprint
        if fingerprint is None:  # build_intent always sets it; only an intent recorded before keyed ones lacks it
            raise ValueError("recipient_fingerprint: required to seal an intent (build it with build_intent)")
        key_id, key = await self._sealing_key(fingerprint)

        def seal(field: str, value: str) -> str:
            return self._seal(key, fingerprint, key_id, field, value)

        # The HTML part is the same personal data as the body, escaped: sealed alike, so erasure reaches it.
        sealed = {field: seal(field, value) for field in Message.PERSONAL if (value := getattr(message, field)) is not None}
        return intent.model_copy(
            update={
                "message": message.model_copy(update=sealed),
                # One token for all the values: fewer bytes in every payload that carries the intent.
                "render_data": {SEALED_RENDER_DATA: seal("render_data", json.dumps(intent.render_data))},
            }
        )

    def opening(self, *, timeout: float | None = None) -> Opening:
        """An opener for one activity's tokens: each recipient's row read once, `timeout` bounding
        the wait for a ledger connection."""
        return Opening(self, timeout)

    async def open(self, value: str, field: str) -> str:
        """The plaintext of a sealed value (a plaintext value as it is); RecipientErased when its key
        generation is gone, SealedValueCorrupt when it does not open under it."""
        return await self.opening().open(value, field)

    async def open_batch(self, batch: LedgerBatch) -> LedgerBatch:
        return await self.opening().open_batch(batch)


class Opening:
    """Opens the tokens of one activity: each recipient's key row is read from the ledger at their
    first token, so what any cache remembers is checked against the ledger before anything opens."""

    def __init__(self, vault: RecipientVault, timeout: float | None) -> None:
        self._vault = vault
        self._timeout = timeout
        self._rows: dict[str, KeyRow | None] = {}

    async def _row(self, fingerprint: str, *, again: bool = False) -> KeyRow | None:
        if again or fingerprint not in self._rows:
            self._rows[fingerprint] = await self._vault.rows.read(fingerprint, timeout=self._timeout)
        return self._rows[fingerprint]

    async def open(self, value: str, field: str) -> str:
        token = _parse(value)
        if token is None:
            return value
        try:
            raw = base64.urlsafe_b64decode(token.data)
        except ValueError:  # binascii.Error: not a token this vault wrote
            raise SealedValueCorrupt(field) from None
        if len(raw) < _NONCE_BYTES + _TAG_BYTES:
            # Shorter than a nonce and a tag: no key could open it (AES-GCM refuses a short nonce outright).
            raise SealedValueCorrupt(field)
        for again in (False, True):
            row = await self._row(token.fingerprint, again=again)
            if not _current(token, row):
                raise RecipientErased(field)
            assert row is not None
            key = await self._vault.unwrapped(token.fingerprint, row)
            try:
                return AESGCM(key).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], token.aad(field)).decode("utf-8")
            except InvalidTag:
                # Before deciding, the key read afresh: the row and the unwrapped key, nothing remembered.
                self._vault.forget(token.fingerprint, row.key_id)
        raise SealedValueCorrupt(field)

    async def open_message(self, message: Message) -> Message:
        """The message with its personal fields opened (plaintext ones as they are)."""
        opened = {
            field: await self.open(value, field)
            for field in Message.PERSONAL
            if (value := getattr(message, field)) is not None
        }
        return message.model_copy(update=opened)

    async def open_intent(self, intent: Intent) -> Intent:
        """The intent as the ledger records it: every sealed field opened."""
        if not is_sealed(intent.message.recipient):
            return intent
        render_data = intent.render_data
        sealed_data = render_data.get(SEALED_RENDER_DATA)
        if isinstance(sealed_data, str) and len(render_data) == 1:
            render_data = json.loads(await self.open(sealed_data, "render_data"))
        return intent.model_copy(update={"message": await self.open_message(intent.message), "render_data": render_data})

    async def open_batch(self, batch: LedgerBatch) -> LedgerBatch:
        """A ledger batch whose intent row (if any) is opened, so the ledger holds plaintext it can erase."""
        if batch.record is None or not is_sealed(batch.record.intent.message.recipient):
            return batch
        intent = batch.record.intent
        try:
            opened = await self.open_intent(intent)
        except UNOPENABLE:
            # Erased before its first write (or unreadable for good): recorded as erase_recipient()
            # leaves an intent, holding nothing of the person; the attempt's refusal says which.
            erased = {field: None for field in Message.PERSONAL} | {"recipient": ERASED, "body": ""}
            opened = intent.model_copy(update={"message": intent.message.model_copy(update=erased), "render_data": {}})
        return batch.model_copy(update={"record": batch.record.model_copy(update={"intent": opened})})
