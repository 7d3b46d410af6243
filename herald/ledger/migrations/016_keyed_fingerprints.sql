-- Keyed fingerprints (herald/fingerprints.py): every fingerprint written from here on is
-- '<key id>:<HMAC-SHA-256 hex>', computed by the client under a key the database never sees.
--
-- Before, fingerprints were plain SHA-256 of the recipient, computed in SQL here and in Python
-- there; with ~10^10 numbers behind a country code, one was reversed by brute force in 1.3 s. Now:
-- * an intent carries its recipient's keyed fingerprint (over the canonical form: an e-mail's local
--   part lower-cased, so Mixed.Case@Example.COM and mixed.case@example.com are one person), and
--   suppression evidence, erasure and the policy gate find a person by it;
-- * fingerprint columns become text (a key id no longer fits char(64));
-- * rows written before keep their plain SHA-256 (consent, lifts, cooldowns, purges hold no
--   plaintext to re-key from): lookups try them as well, so nothing recorded earlier stops counting,
--   and intents written before (recipient_fingerprint NULL) are still found by their recipient.
--
-- ALTER COLUMN ... TYPE text rewrites those tables once (char(n) to text trims); the ledger is
-- locked for that time, so run this migration in a deploy window on a large ledger.

ALTER TABLE intents ADD COLUMN recipient_fingerprint text;
COMMENT ON COLUMN intents.recipient_fingerprint IS
    'Keyed fingerprint of the canonical recipient (key id:HMAC hex); NULL for intents recorded before 016.';
CREATE INDEX intents_by_recipient_fingerprint ON intents (recipient_fingerprint, channel);
-- Which intents name an attachment: an erasure keeps an artifact another recipient's intent names.
CREATE INDEX intents_by_attachment ON intents (attachment_sha256) WHERE attachment_sha256 IS NOT NULL;

ALTER TABLE intents ALTER COLUMN intent_fingerprint TYPE text;
ALTER TABLE consent_evidence ALTER COLUMN recipient_fingerprint TYPE text;
ALTER TABLE suppression_lifts ALTER COLUMN recipient_fingerprint TYPE text;
ALTER TABLE recipient_cooldowns ALTER COLUMN recipient_fingerprint TYPE text;
ALTER TABLE ledger_purges ALTER COLUMN recipient_fingerprint TYPE text;
ALTER TABLE erased_suppressions ALTER COLUMN recipient_fingerprint TYPE text;
COMMENT ON COLUMN ledger_purges.recipient_fingerprint IS
    'Erasure: whose data, as the keyed fingerprint of the active key (plain SHA-256 before 016).';

-- The stored fingerprint, not one computed here: SQL has no key, and a plain hash is reversible.
-- NULL for intents recorded before 016 (found by their recipient column instead).
CREATE OR REPLACE VIEW suppression_evidence AS
SELECT i.recipient_fingerprint, i.channel,
       'opt_out' AS cause, 'Twilio 21610' AS detail, o.observed_at AS seen_at, i.recipient
  FROM observations o JOIN intents i ON i.workflow_id = o.workflow_id
 WHERE i.channel = 'sms' AND o.error_code = 21610
UNION ALL
SELECT i.recipient_fingerprint, i.channel,
       CASE r.provider_status WHEN 'spamreport' THEN 'complaint' ELSE 'hard_bounce' END,
       r.provider || ' ' || r.provider_status, r.received_at, i.recipient
  FROM receipt_inbox r
  JOIN attempts a ON a.attempt_ref = r.attempt_ref
  JOIN intents i ON i.workflow_id = a.workflow_id
 WHERE i.channel = 'email'
   AND (r.provider_status = 'spamreport' OR (r.provider_status = 'bounce' AND coalesce(r.error_code, 500) >= 500));

-- Crypto-shredding (herald/recipient_vault.py): each recipient's data key, which seals their
-- number or address, bodies, subjects and render data in every Temporal payload. Erasure deletes
-- it, and no payload of theirs decodes again, whoever holds the deployment's codec key.
-- Not audit data: the services insert and read keys; only erase_recipient deletes one.
CREATE TABLE recipient_keys (
    recipient_fingerprint text        PRIMARY KEY,
    data_key              bytea       NOT NULL CHECK (octet_length(data_key) = 32),
    created_at            timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE recipient_keys IS 'Per-recipient data keys sealing personal fields in Temporal payloads; erasure deletes them.';
REVOKE ALL ON recipient_keys FROM PUBLIC;
GRANT SELECT, INSERT ON recipient_keys TO herald_app;

-- An erased recipient's attachments go too (a report addressed to them is their data): content
-- and filename are replaced, the key, media type and row stay. The trigger lets that through
-- like the intents' redaction, and nothing else.
CREATE FUNCTION erased_artifact_filename() RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT '(erased)' $$;

CREATE OR REPLACE FUNCTION refuse_audit_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A redaction run by erase_recipient or purge_inbox_payloads: only personal columns change,
    -- and only to the markers. The flag is transaction-local and only those functions set it;
    -- the services' role cannot UPDATE at all, so it cannot use the flag either.
    IF TG_OP = 'UPDATE' AND current_setting('herald.redacting', true) = 'on' THEN
        -- Nested, not ANDed: PL/pgSQL plans NEW.payload even where the table has no such column.
        IF TG_TABLE_NAME = 'intents' THEN
            IF to_jsonb(NEW) - ARRAY['recipient', 'render_data', 'body', 'subject']
                 = to_jsonb(OLD) - ARRAY['recipient', 'render_data', 'body', 'subject']
               AND NEW.recipient = erased_recipient() AND NEW.render_data = '{}'::jsonb
               AND NEW.body = '' AND NEW.subject IS NULL THEN
                RETURN NEW;
            END IF;
        ELSIF TG_TABLE_NAME = 'receipt_inbox' THEN
            IF to_jsonb(NEW) - 'payload' = to_jsonb(OLD) - 'payload' AND NEW.payload = purged_payload() THEN
                RETURN NEW;
            END IF;
        ELSIF TG_TABLE_NAME = 'artifacts' THEN
            IF to_jsonb(NEW) - ARRAY['content', 'size_bytes', 'filename']
                 = to_jsonb(OLD) - ARRAY['content', 'size_bytes', 'filename']
               AND NEW.content = ''::bytea AND NEW.size_bytes = 0 AND NEW.filename = erased_artifact_filename() THEN
                RETURN NEW;
            END IF;
        END IF;
    END IF;
    RAISE EXCEPTION 'ledger table % is append-only', TG_TABLE_NAME;
END;
$$;

-- Erase by fingerprint: p_fingerprints are every fingerprint the person may have been written
-- under (the active key's first: it names the purge), p_canonical their canonical recipient, which
-- finds intents recorded before 016 (compared lower-cased: those stored the local part as given).
-- Returns the purge's id, the intents erased, the attachments erased (those the erased intents
-- named and no other recipient's intent names: another person's report may be the same bytes), and
-- the data keys destroyed (every sealed Temporal payload of theirs stops decoding).
DROP FUNCTION erase_recipient(text, text, text);
CREATE FUNCTION erase_recipient(p_fingerprints text[], p_canonical text, p_operator text, p_reason text,
                                OUT purge_id bigint, OUT intents_erased integer, OUT artifacts_erased integer,
                                OUT keys_destroyed integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    attachments text[];
BEGIN
    IF cardinality(p_fingerprints) = 0 OR p_canonical = '' THEN
        RAISE EXCEPTION 'erase_recipient needs the recipient''s fingerprints and canonical form'
            USING ERRCODE = '22023';
    END IF;
    purge_id := nextval(pg_get_serial_sequence('ledger_purges', 'id'));
    -- Before the recipient disappears from the intents the evidence is derived from.
    INSERT INTO erased_suppressions (recipient_fingerprint, channel, cause, detail, seen_at, purge_id)
    SELECT p_fingerprints[1], e.channel, e.cause, e.detail, e.seen_at, purge_id
      FROM suppression_evidence e
     WHERE e.recipient <> erased_recipient()
       AND (e.recipient_fingerprint = ANY(p_fingerprints)
            OR (e.recipient_fingerprint IS NULL AND lower(e.recipient) = p_canonical));
    PERFORM set_config('herald.redacting', 'on', true);
    WITH erased AS (
        UPDATE intents SET recipient = erased_recipient(), render_data = '{}'::jsonb, body = '', subject = NULL
         WHERE recipient <> erased_recipient()
           AND (recipient_fingerprint = ANY(p_fingerprints)
                OR (recipient_fingerprint IS NULL AND lower(recipient) = p_canonical))
        RETURNING attachment_sha256)
    SELECT count(*), array_agg(DISTINCT attachment_sha256) FILTER (WHERE attachment_sha256 IS NOT NULL)
      INTO intents_erased, attachments FROM erased;
    UPDATE artifacts a SET content = ''::bytea, size_bytes = 0, filename = erased_artifact_filename()
     WHERE a.sha256 = ANY(coalesce(attachments, ARRAY[]::text[])) AND a.filename <> erased_artifact_filename()
       AND NOT EXISTS (SELECT 1 FROM intents o
                        WHERE o.attachment_sha256 = a.sha256 AND o.recipient <> erased_recipient());
    GET DIAGNOSTICS artifacts_erased = ROW_COUNT;
    PERFORM set_config('herald.redacting', 'off', true);
    DELETE FROM recipient_keys WHERE recipient_fingerprint = ANY(p_fingerprints);
    GET DIAGNOSTICS keys_destroyed = ROW_COUNT;
    INSERT INTO ledger_purges (id, kind, recipient_fingerprint, rows_affected, operator, reason)
    VALUES (purge_id, 'erasure', p_fingerprints[1], intents_erased, p_operator, p_reason);
END;
$$;
REVOKE ALL ON FUNCTION erase_recipient(text[], text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION erase_recipient(text[], text, text, text) TO herald_app;
