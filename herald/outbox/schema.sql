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

-- Erasure of one person's notices (herald/outbox/erasure.py, run by `starter.py erase`): every row
-- whose notice has a channel entry addressed to one of p_recipients (each compared whole with
-- "recipient", a JSON string, inside the "channels" array: never a pattern over the raw text,
-- which could hit a number inside another person's notice) gets this fixed marker for a notice.
-- A row not yet relayed becomes refused, so no relay claims it again; a relayed row keeps its
-- state and times. The caller finds the spellings (canonical forms are compared in Python, where
-- herald.fingerprints defines them) and passes them exactly as the notices hold them.
--
-- Why a SECURITY DEFINER function and not a grant: the relay's login is the one the erase command
-- finds in HERALD_OUTBOX_DATABASE_URL, and granting it UPDATE (notice) would let a leaked relay
-- password rewrite any committed notice into another message to another number. Through this
-- function it can only replace notices with the marker, and only those addressed to someone it
-- names; it could already stop any row from being sent (UPDATE of state), so erasing adds no new
-- power over delivery, only the loss of a notice's text. Owned by whoever applies this schema
-- (the table's owner), with a fixed search_path (as the ledger's own erase_recipient, migration
-- 013), so no caller's schema can stand in for the table.
-- Returns, per erased row, its business key, the channels that named the recipient (so the
-- caller can find their intents, `<key>/<channel>`), whether it was still pending, and how many
-- seconds of a relay's claim on it were left (a relay may be starting it from a copy read before).
CREATE OR REPLACE FUNCTION herald_outbox_erase(p_recipients text[])
RETURNS TABLE (business_key text, channels text[], was_pending boolean, claim_seconds_left double precision)
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH named AS (
        SELECT o.id, o.state = 'pending' AS was_pending,
               CASE WHEN o.state = 'pending' AND o.tries > 0
                    THEN greatest(extract(epoch FROM o.next_try_at - now())::double precision, 0) ELSE 0 END AS claim_left,
               ARRAY(SELECT DISTINCT entry ->> 'channel'
                       FROM jsonb_array_elements(CASE WHEN jsonb_typeof(o.notice -> 'channels') = 'array'
                                                      THEN o.notice -> 'channels' END) AS entry
                      WHERE jsonb_typeof(entry -> 'recipient') = 'string'
                        AND entry ->> 'recipient' = ANY (p_recipients)
                        AND jsonb_typeof(entry -> 'channel') = 'string') AS channels
          FROM herald_outbox o
         -- Containment is exact: "channels" is an array holding an object whose "recipient" is r.
         WHERE EXISTS (SELECT FROM unnest(p_recipients) AS r
                        WHERE o.notice @> jsonb_build_object('channels', jsonb_build_array(jsonb_build_object('recipient', r))))
        FOR UPDATE
    )
    UPDATE herald_outbox o
       SET notice = '{"erased": true}'::jsonb,
           state = CASE WHEN named.was_pending THEN 'refused' ELSE o.state END,
           last_error = CASE WHEN named.was_pending
                             THEN 'erased: the recipient''s personal data was erased on request; never to be relayed'
                             ELSE o.last_error END
      FROM named
     WHERE o.id = named.id
    RETURNING o.business_key, named.channels, named.was_pending, named.claim_left;
$$;
-- Functions are executable by PUBLIC unless revoked; the grant to the relay's role follows below.
REVOKE ALL ON FUNCTION herald_outbox_erase(text[]) FROM PUBLIC;

-- The relay's role: what `python -m herald.outbox` runs (herald/outbox/relay.py) and nothing more,
-- so a leaked relay password cannot delete, rewrite or read the service's business data.
--   SELECT on herald_outbox ............ the claim's subquery (state, next_try_at, id), its
--                                        RETURNING (id, notice, tries) and the backlog's counts
--   UPDATE (tries, next_try_at, state,
--           last_error, relayed_at) .... the claim's lease and the mark; FOR UPDATE SKIP LOCKED
--                                        needs UPDATE on a column too
--   EXECUTE on herald_outbox_erase ..... `starter.py erase`: notices to one person replaced by the
--                                        marker, nothing else (see the function)
-- No INSERT (the service enqueues, in its own transaction), no DELETE or TRUNCATE, no UPDATE of
-- business_key or notice (what the service committed is what is sent; the erase function writes
-- only its marker), no sequence, no other table, no DDL (the schema is applied by the service's
-- owner, not with the relay's login).
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
    -- `starter.py erase` reaches the outbox with the relay's login (HERALD_OUTBOX_DATABASE_URL).
    GRANT EXECUTE ON FUNCTION herald_outbox_erase(text[]) TO herald_outbox_relay;
END;
$$;

-- The console's role: the routes page's outbox backlog (herald/console/outbox_backlog.py), which is
-- starter.py report's count of rows by state and the oldest unrelayed's age, and nothing more.
--   SELECT (state, created_at) on herald_outbox ... all the backlog's query reads
-- Not `notice` (each person's number or address and render data, in clear), not business_key, no
-- write, no other table: the console refuses a login that may read a notice or write here.
-- Logins are members: `CREATE ROLE <login> LOGIN PASSWORD '...' IN ROLE herald_outbox_reader`
-- (the local stack's is herald_console_outbox). Created, or left to an administrator, as the relay's.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'herald_outbox_reader') THEN
        BEGIN
            CREATE ROLE herald_outbox_reader NOLOGIN;
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'role herald_outbox_reader does not exist and % may not create it: console grant skipped '
                    '(as an administrator, run CREATE ROLE herald_outbox_reader NOLOGIN, then apply this schema again)', current_user;
                RETURN;
            WHEN duplicate_object OR unique_violation THEN
                NULL;
        END;
    END IF;
    -- REVOKE ALL on the table revokes its column grants too: exactly these two columns after every apply.
    REVOKE ALL ON herald_outbox FROM herald_outbox_reader;
    GRANT SELECT (state, created_at) ON herald_outbox TO herald_outbox_reader;
END;
$$;
