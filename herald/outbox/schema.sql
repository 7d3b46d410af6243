-- Herald's transactional outbox, in the *service's* own database (not Herald's ledger).
-- Apply once: `python -m herald.outbox --apply-schema` (or run this file with psql). Idempotent.
--
-- The service inserts a row in the same transaction as its business row (herald.outbox.enqueue):
-- both commit or neither does. The relay (`python -m herald.outbox`) turns rows into intents.

CREATE TABLE IF NOT EXISTS herald_outbox (
    id           bigserial   PRIMARY KEY,
    business_key text        NOT NULL,                  -- the notice's key, for operators and queries
    notice       jsonb       NOT NULL,                  -- herald.notice.NoticeRequest, as JSON
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- pending: not yet started; relayed: every channel's intent started (or already existed);
    -- refused: Herald refuses the payload (errors in last_error); it is never retried blindly.
    state        text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'relayed', 'refused')),
    tries        integer     NOT NULL DEFAULT 0,
    -- A claimed row is leased until here; a transient failure backs off until here.
    next_try_at  timestamptz NOT NULL DEFAULT now(),
    last_error   text,
    relayed_at   timestamptz
);
COMMENT ON TABLE herald_outbox IS 'Notices committed with the business change that caused them; relayed to Herald by python -m herald.outbox.';
CREATE INDEX IF NOT EXISTS herald_outbox_due ON herald_outbox (next_try_at, id) WHERE state = 'pending';

-- Wake the relays at once on commit (NOTIFY is delivered when the inserting transaction commits);
-- their polling stays as the safety net.
CREATE OR REPLACE FUNCTION herald_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('herald_outbox', '');
    RETURN NULL;
END;
$$;
CREATE OR REPLACE TRIGGER herald_outbox_notify AFTER INSERT ON herald_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION herald_outbox_notify();
