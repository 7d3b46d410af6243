-- Herald ledger, version 1.
-- Rules every table follows: rows are appended, never updated or deleted (the one exception,
-- receipt_redelivery, is scheduling state and says so); every insert is idempotent on a
-- deterministic key because the activities that write them are retried by Temporal.

-- One row per notification intent. The workflow id is `<business key>/<channel>`.
CREATE TABLE intents (
    workflow_id        text        PRIMARY KEY,
    business_key       text        NOT NULL,
    channel            text        NOT NULL,
    -- One intent per business event and channel: a constraint, not a cache, so a duplicate
    -- start that slips past Temporal (e.g. after its retention) still cannot make a second intent.
    CONSTRAINT intents_one_per_key_and_channel UNIQUE (business_key, channel),
    recipient          text        NOT NULL,  -- PII: kept here, never in Temporal ids or search attributes
    template_id        text        NOT NULL,
    -- A fixed version, never an alias like "latest": a retry renders what the first attempt rendered.
    template_version   integer     NOT NULL CHECK (template_version >= 1),
    render_data        jsonb       NOT NULL,
    body               text        NOT NULL,
    content_sha256     char(64)    NOT NULL,
    -- Hash of the whole payload; a reused key with another payload is refused by comparing it.
    intent_fingerprint char(64)    NOT NULL,
    created_at         timestamptz NOT NULL,
    expires_at         timestamptz NOT NULL,
    first_run_id       text        NOT NULL,
    recorded_at        timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE intents IS 'One immutable notification intent per (business key, channel).';

-- One row per transport attempt, written and committed before the submit call, so a crash
-- between the provider's answer and our next write leaves a prepared attempt to reconcile.
CREATE TABLE attempts (
    attempt_ref  text        PRIMARY KEY,  -- our reference, carried in the status callback URL
    workflow_id  text        NOT NULL REFERENCES intents (workflow_id),
    number       integer     NOT NULL CHECK (number >= 1),
    -- Attempt numbers are dense per intent: a second "attempt 1" is a bug, not a retry.
    CONSTRAINT attempts_one_per_number UNIQUE (workflow_id, number),
    prepared_at  timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE attempts IS 'Transport attempts, recorded before the provider is called.';

-- Append-only state transitions of an intent. (workflow_id, seq) is the deterministic key:
-- the workflow numbers its transitions, so a retried write is the same row.
CREATE TABLE transitions (
    workflow_id    text        NOT NULL REFERENCES intents (workflow_id),
    seq            integer     NOT NULL CHECK (seq >= 1),
    PRIMARY KEY (workflow_id, seq),
    at             timestamptz NOT NULL,
    from_state     text        NOT NULL,
    to_state       text        NOT NULL,
    reason         text        NOT NULL,
    source         text        NOT NULL CHECK (source IN ('submit', 'poll', 'report', 'operator', 'clock', 'ledger')),
    attempt_number integer,
    recorded_at    timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE transitions IS 'Append-only intent state changes: when, from, to, why, and who observed it.';

-- Every provider fact about an attempt (submit answer, poll, report), applied or not.
-- An ignored observation (duplicate, stale, after a terminal state) is evidence too.
CREATE TABLE observations (
    workflow_id     text        NOT NULL REFERENCES intents (workflow_id),
    seq             integer     NOT NULL CHECK (seq >= 1),
    PRIMARY KEY (workflow_id, seq),
    attempt_number  integer,
    source          text        NOT NULL CHECK (source IN ('submit', 'poll', 'report', 'operator', 'clock', 'ledger')),
    kind            text        NOT NULL,  -- accepted, retryable, rejected, unknown, found, not_found, status, ...
    provider_id     text,
    provider_status text,
    error_code      integer,
    applied         boolean     NOT NULL,
    reason          text        NOT NULL,
    inbox_id        bigint,               -- set when the observation came from a stored report
    observed_at     timestamptz NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE observations IS 'Append-only provider observations per intent, with whether they were applied and why.';
CREATE INDEX observations_by_provider_id ON observations (provider_id) WHERE provider_id IS NOT NULL;

-- Delivery reports exactly as the provider sent them, stored before anything interprets them.
CREATE TABLE receipt_inbox (
    id                  bigserial   PRIMARY KEY,
    provider            text        NOT NULL,
    provider_message_id text        NOT NULL,
    provider_status     text        NOT NULL,
    -- A provider resends reports; the same status for the same message is the same fact,
    -- so a redelivery conflicts here and is one row, not two.
    CONSTRAINT receipt_inbox_one_per_fact UNIQUE (provider, provider_message_id, provider_status),
    attempt_ref         text,                 -- from our callback URL; may name an attempt not yet known
    error_code          integer,
    provider_event_at   timestamptz,          -- the provider's clock orders reports; ours only ages them
    payload             jsonb       NOT NULL, -- the signed form, minus recipient and body (PII)
    received_at         timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE receipt_inbox IS 'Verified provider reports, committed before the callback is answered 2xx.';
CREATE INDEX receipt_inbox_by_attempt ON receipt_inbox (attempt_ref);

-- How each inbox row ended: applied to its intent, or recorded as ignored. Written once.
CREATE TABLE receipt_outcomes (
    inbox_id    bigint      PRIMARY KEY REFERENCES receipt_inbox (id),
    outcome     text        NOT NULL CHECK (outcome IN ('applied', 'ignored')),
    reason      text        NOT NULL,
    workflow_id text,
    decided_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE receipt_outcomes IS 'The single verdict on each inbox row; a row without one is still owed a signal.';

-- Scheduling state of the drainer that re-signals reports not yet decided. Not audit data:
-- the one table whose rows are updated, which is why it is separate from the inbox.
CREATE TABLE receipt_redelivery (
    inbox_id    bigint      PRIMARY KEY REFERENCES receipt_inbox (id),
    tries       integer     NOT NULL DEFAULT 0,
    next_try_at timestamptz NOT NULL,
    last_error  text
);
COMMENT ON TABLE receipt_redelivery IS 'Mutable retry schedule for signalling inbox rows; safe to truncate.';

-- The ledger is append-only: refuse UPDATE and DELETE on audit tables at the database, so a
-- bug or a hand-typed statement cannot rewrite history.
CREATE FUNCTION refuse_audit_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger table % is append-only', TG_TABLE_NAME;
END;
$$;
CREATE TRIGGER intents_append_only BEFORE UPDATE OR DELETE ON intents
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
CREATE TRIGGER attempts_append_only BEFORE UPDATE OR DELETE ON attempts
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
CREATE TRIGGER transitions_append_only BEFORE UPDATE OR DELETE ON transitions
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
CREATE TRIGGER observations_append_only BEFORE UPDATE OR DELETE ON observations
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
CREATE TRIGGER receipt_inbox_append_only BEFORE UPDATE OR DELETE ON receipt_inbox
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
CREATE TRIGGER receipt_outcomes_append_only BEFORE UPDATE OR DELETE ON receipt_outcomes
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
