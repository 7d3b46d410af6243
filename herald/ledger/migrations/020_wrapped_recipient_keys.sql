-- Recipient data keys that follow an erasure at once, and that a copy of the database cannot open
-- (issue 29; herald/recipient_vault.py, herald/key_encryption.py).
--
-- * key_id names each generation of a person's data key, and every token sealed from now on
--   (`sealed:2:<fingerprint>:<key id>:...`) names the generation that sealed it. A process told a
--   token's key id knows whether the ledger still holds that key without trying it: no row, or a
--   row of another id (the person was erased, then came back), is an erased generation; the same
--   id that does not open the token is corruption. Rows written before get an id beginning 'v1.':
--   the generations that sealed `sealed:1:` tokens (those name no id), which still open.
-- * wrapped_key is the data key wrapped (AES-256-GCM) under a key-encryption key (KEK) that the
--   database never holds, named by kek_id. data_key, the key in the clear, is kept only on rows
--   written before this migration, until `python -m herald.jobs.rewrap_keys` (the ledger's
--   owner, with the KEKs) wraps them. New rows can only be wrapped: the services' login may insert
--   every column but data_key.
--
-- Code from before this migration reads data_key and finds NULL on new rows: stop every client and
-- worker of the old release before applying it (a deploy window, as for 016).

ALTER TABLE recipient_keys
    ADD COLUMN key_id text NOT NULL DEFAULT ('v1.' || left(replace(gen_random_uuid()::text, '-', ''), 12)),
    ADD COLUMN wrapped_key bytea,
    ADD COLUMN kek_id text,
    ALTER COLUMN data_key DROP NOT NULL;
-- The default only named the rows already there: a new generation's id comes from the code that made it.
ALTER TABLE recipient_keys ALTER COLUMN key_id DROP DEFAULT;

COMMENT ON TABLE recipient_keys IS
    'Per-recipient data keys sealing personal fields in Temporal payloads, wrapped under a KEK the database never holds; erasure deletes them.';
COMMENT ON COLUMN recipient_keys.key_id IS
    'This generation of the data key, named in every token it sealed (sealed:2); ids beginning v1. predate 020.';
COMMENT ON COLUMN recipient_keys.wrapped_key IS
    'The data key, AES-256-GCM under the KEK kek_id, bound to the fingerprint and key_id; NULL only on rows not yet re-wrapped.';
COMMENT ON COLUMN recipient_keys.kek_id IS 'The key-encryption key that wrapped wrapped_key (rotation: several are held, one wraps).';
COMMENT ON COLUMN recipient_keys.data_key IS 'The data key in the clear: rows written before 020 only, until re-wrapped.';

-- The id travels inside tokens between ':'-separated parts: no ':' and no whitespace in it.
ALTER TABLE recipient_keys ADD CONSTRAINT recipient_keys_key_id_shape
    CHECK (key_id ~ '^[A-Za-z0-9._-]{1,64}$');
-- One form of the key per row: in the clear (before 020) or wrapped, never both, never neither.
ALTER TABLE recipient_keys ADD CONSTRAINT recipient_keys_one_form
    CHECK ((data_key IS NULL) <> (wrapped_key IS NULL));
-- A wrapped key names the KEK that opens it, and only a wrapped key names one.
ALTER TABLE recipient_keys ADD CONSTRAINT recipient_keys_wrapped_names_its_kek
    CHECK ((wrapped_key IS NULL) = (kek_id IS NULL));
-- Nonce, 32 key bytes and tag locally; a KMS's ciphertext is longer, but never unbounded.
ALTER TABLE recipient_keys ADD CONSTRAINT recipient_keys_wrapped_size
    CHECK (wrapped_key IS NULL OR octet_length(wrapped_key) BETWEEN 33 AND 4096);
ALTER TABLE recipient_keys ADD CONSTRAINT recipient_keys_kek_id_shape
    CHECK (kek_id IS NULL OR kek_id ~ '^[A-Za-z0-9._:/-]{1,255}$');

-- The services may add keys but never one in the clear: INSERT on every column but data_key.
REVOKE INSERT ON recipient_keys FROM herald_app;
GRANT INSERT (recipient_fingerprint, key_id, wrapped_key, kek_id) ON recipient_keys TO herald_app;
