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

-- The relay's role: what `python -m herald.outbox` runs (herald/outbox/relay.py) and nothing more,
-- so a leaked relay password cannot delete, rewrite or read the service's business data.
--   SELECT on herald_outbox ............ the claim's subquery (state, next_try_at, id), its
--                                        RETURNING (id, notice, tries) and the backlog's counts
--   UPDATE (tries, next_try_at, state,
--           last_error, relayed_at) .... the claim's lease and the mark; FOR UPDATE SKIP LOCKED
--                                        needs UPDATE on a column too
-- No INSERT (the service enqueues, in its own transaction), no DELETE or TRUNCATE, no UPDATE of
-- business_key or notice (what the service committed is what is sent), no sequence, no other
-- table, no DDL (the schema is applied by the service's owner, not with the relay's login).
-- LISTEN needs no privilege. Logins are members: `CREATE ROLE <login> LOGIN PASSWORD '...' IN
-- ROLE herald_outbox_relay` (the local stack's is herald_outbox_relay_login).
--
-- herald_outbox_relay is created here when the applying role may create roles; where it may not,
-- an administrator runs `CREATE ROLE herald_outbox_relay NOLOGIN` once and the schema is applied
-- again, which grants. Until then the grants are skipped with a notice and the relay needs a
-- login that owns the table, as before.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'herald_outbox_relay') THEN
        BEGIN
            CREATE ROLE herald_outbox_relay NOLOGIN;
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'role herald_outbox_relay does not exist and % may not create it: relay grants skipped '
                    '(as an administrator, run CREATE ROLE herald_outbox_relay NOLOGIN, then apply this schema again)', current_user;
                RETURN;
            -- Roles are per server: another database's schema, applied at the same moment, made it first.
            WHEN duplicate_object OR unique_violation THEN
                NULL;
        END;
    END IF;
    -- From nothing to exactly these on every apply, so a grant added by hand does not linger.
    REVOKE ALL ON herald_outbox FROM herald_outbox_relay;
    GRANT SELECT ON herald_outbox TO herald_outbox_relay;
    GRANT UPDATE (tries, next_try_at, state, last_error, relayed_at) ON herald_outbox TO herald_outbox_relay;
END;
$$;
