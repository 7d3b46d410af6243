-- Personal data that can be destroyed while the audit trail stays.
--
-- The ledger is append-only, and an erasure request or a retention period still has to be
-- answerable. Personal data lives in few columns: an intent's recipient, render data, rendered
-- body and subject, and a report's raw payload (already stripped of recipient and body, but still
-- the provider's words about a person's message). Two functions, owned by the migrating role and
-- executed with its rights, are the only way to overwrite those columns, and only with a fixed
-- marker: the row trigger lets an UPDATE through when the function has flagged its own transaction
-- and nothing but those columns changes. Workflow ids, fingerprints, states, times, reasons and
-- hashes stay, so every count, view and duplicate check still adds up after an erasure.
--
-- Each run is recorded in ledger_purges (append-only, like every audit table).

CREATE TABLE ledger_purges (
    id                    bigserial   PRIMARY KEY,
    kind                  text        NOT NULL CHECK (kind IN ('erasure', 'inbox_retention')),
    recipient_fingerprint char(64),              -- erasure: whose data (SHA-256), never the recipient
    older_than            timestamptz,           -- inbox_retention: the cut-off
    rows_affected         integer     NOT NULL CHECK (rows_affected >= 0),
    operator              text        NOT NULL CHECK (length(operator) BETWEEN 1 AND 100),
    reason                text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    done_at               timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'erasure') = (recipient_fingerprint IS NOT NULL)),
    CHECK ((kind = 'inbox_retention') = (older_than IS NOT NULL))
);
COMMENT ON TABLE ledger_purges IS 'Every erasure and retention run: what kind, whose (fingerprint), how many rows, who and why.';

-- An erased recipient who had opted out, bounced or complained stays suppressed: the evidence is
-- kept by fingerprint (a suppression list is data kept to honour the person's own request).
CREATE TABLE erased_suppressions (
    recipient_fingerprint char(64)    NOT NULL,
    channel               text        NOT NULL,
    cause                 text        NOT NULL,
    detail                text        NOT NULL,
    seen_at               timestamptz NOT NULL,
    purge_id              bigint      NOT NULL
);
COMMENT ON TABLE erased_suppressions IS 'Suppression evidence of erased recipients, by fingerprint, so an erasure never lifts an opt-out.';
CREATE INDEX erased_suppressions_by_recipient ON erased_suppressions (recipient_fingerprint, channel);

DO $$
DECLARE
    audit_table text;
BEGIN
    FOREACH audit_table IN ARRAY ARRAY['ledger_purges', 'erased_suppressions'] LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I FOR EACH ROW '
                       'EXECUTE FUNCTION refuse_audit_rewrite()', audit_table || '_append_only', audit_table);
        EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT '
                       'EXECUTE FUNCTION refuse_audit_truncate()', audit_table || '_no_truncate', audit_table);
        EXECUTE format('REVOKE ALL ON %I FROM PUBLIC', audit_table);
        EXECUTE format('GRANT SELECT ON %I TO herald_app', audit_table);
    END LOOP;
END;
$$;

-- The markers a redaction writes; nothing else may replace personal data.
CREATE FUNCTION erased_recipient() RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT '(erased)' $$;
CREATE FUNCTION purged_payload() RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$ SELECT '{"purged": true}'::jsonb $$;

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
        END IF;
    END IF;
    RAISE EXCEPTION 'ledger table % is append-only', TG_TABLE_NAME;
END;
$$;

-- Erase one recipient's personal data from every intent addressed to them; returns the purge's id
-- and how many intents were erased. p_recipient is normalised as intents store it (E.164, or the
-- normalised e-mail address): the caller validates it first.
CREATE FUNCTION erase_recipient(p_recipient text, p_operator text, p_reason text,
                                OUT purge_id bigint, OUT intents_erased integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    fingerprint char(64) := encode(sha256(convert_to(p_recipient, 'UTF8')), 'hex');
BEGIN
    purge_id := nextval(pg_get_serial_sequence('ledger_purges', 'id'));
    -- Before the recipient disappears from the intents the evidence is derived from.
    INSERT INTO erased_suppressions (recipient_fingerprint, channel, cause, detail, seen_at, purge_id)
    SELECT fingerprint, e.channel, e.cause, e.detail, e.seen_at, purge_id
      FROM suppression_evidence e WHERE e.recipient = p_recipient;
    PERFORM set_config('herald.redacting', 'on', true);
    UPDATE intents SET recipient = erased_recipient(), render_data = '{}'::jsonb, body = '', subject = NULL
     WHERE recipient = p_recipient;
    GET DIAGNOSTICS intents_erased = ROW_COUNT;
    PERFORM set_config('herald.redacting', 'off', true);
    INSERT INTO ledger_purges (id, kind, recipient_fingerprint, rows_affected, operator, reason)
    VALUES (purge_id, 'erasure', fingerprint, intents_erased, p_operator, p_reason);
END;
$$;

-- Retention: replace the raw payload of every decided report received before p_older_than.
-- Undecided reports keep theirs (they are still owed a signal); the row, its status, error code,
-- times and verdict stay.
CREATE FUNCTION purge_inbox_payloads(p_older_than timestamptz, p_operator text, p_reason text,
                                     OUT purge_id bigint, OUT rows_purged integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    PERFORM set_config('herald.redacting', 'on', true);
    UPDATE receipt_inbox r SET payload = purged_payload()
     WHERE r.received_at < p_older_than AND r.payload <> purged_payload()
       AND EXISTS (SELECT 1 FROM receipt_outcomes o WHERE o.inbox_id = r.id);
    GET DIAGNOSTICS rows_purged = ROW_COUNT;
    PERFORM set_config('herald.redacting', 'off', true);
    INSERT INTO ledger_purges (kind, older_than, rows_affected, operator, reason)
    VALUES ('inbox_retention', p_older_than, rows_purged, p_operator, p_reason)
    RETURNING id INTO purge_id;
END;
$$;

REVOKE ALL ON FUNCTION erase_recipient(text, text, text), purge_inbox_payloads(timestamptz, text, text) FROM PUBLIC;
-- The services' login runs them (starter.py erase, python -m herald.ledger retention); a deployment
-- that wants them apart grants EXECUTE to an operators' role instead and revokes it here.
GRANT EXECUTE ON FUNCTION erase_recipient(text, text, text), purge_inbox_payloads(timestamptz, text, text) TO herald_app;
