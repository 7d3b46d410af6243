-- A provider message belongs to at most one attempt, across all intents (issue 29).
--
-- Twilio takes no id of ours, so an attempt whose answer was lost is found by recipient, sender and
-- body. Two intents that send the same text to the same number moments apart each fit the other's
-- message: a lookup credited the second intent with the first's message and closed it `delivered`
-- while its own was never sent. The ledger now says who holds each provider message, and a claim
-- is written in the transaction that records the evidence it rests on:
-- * the submit's answer, a poll by id and a report carrying our attempt reference (Twilio's signed
--   callback URL, an ESP event's unique_args) are exact: the provider said which attempt it was;
-- * a lookup by recipient and content claims only by the rule of herald/claims.py (one unclaimed
--   fitting message, no other unresolved attempt that could have created it), under an advisory
--   lock per provider and content, reading the claims and the rivals in the same transaction.

CREATE TABLE message_claims (
    provider            text        NOT NULL,
    provider_message_id text        NOT NULL,
    -- The constraint the issue asks for: a second claim on the same provider message conflicts here.
    PRIMARY KEY (provider, provider_message_id),
    attempt_ref         text        NOT NULL REFERENCES attempts (attempt_ref),
    workflow_id         text        NOT NULL REFERENCES intents (workflow_id),
    -- What the claim rests on: the submit's answer, a poll by id, a report naming the attempt (all
    -- exact), or the claim rule over a search by recipient and content.
    basis               text        NOT NULL CHECK (basis IN ('submit', 'poll', 'report', 'lookup_by_reference')),
    claimed_at          timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE message_claims IS
    'Which attempt holds each provider message: one holder per message, claimed with the evidence; append-only.';
-- "Does this attempt hold a message?" is asked for every rival of a lookup by reference.
CREATE INDEX message_claims_by_attempt ON message_claims (attempt_ref);

-- A claim the constraint refused because another intent's attempt held the message: evidence
-- that a provider broke its own documentation, or that an inference went wrong, for a human.
-- Attempts of one intent may share a message id by design (an e-mail copy sent under the
-- earlier attempt's Message-ID, so the person sees one message), so only other intents count.
CREATE TABLE refused_claims (
    provider            text        NOT NULL,
    provider_message_id text        NOT NULL,
    attempt_ref         text        NOT NULL,  -- the attempt whose claim was refused
    basis               text        NOT NULL,
    -- Idempotent: a checkpoint or a redelivered report that claims again is the same refusal.
    PRIMARY KEY (provider, provider_message_id, attempt_ref, basis),
    workflow_id         text        NOT NULL,
    held_by             text        NOT NULL,  -- the attempt holding the message
    refused_at          timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE refused_claims IS
    'Claims on a provider message another intent''s attempt already held: counted by the report.';

CREATE TRIGGER message_claims_append_only BEFORE UPDATE OR DELETE ON message_claims
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
CREATE TRIGGER message_claims_no_truncate BEFORE TRUNCATE ON message_claims
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_truncate();
CREATE TRIGGER refused_claims_append_only BEFORE UPDATE OR DELETE ON refused_claims
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
CREATE TRIGGER refused_claims_no_truncate BEFORE TRUNCATE ON refused_claims
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_truncate();
REVOKE ALL ON message_claims, refused_claims FROM PUBLIC;
GRANT SELECT, INSERT ON message_claims, refused_claims TO herald_app;

-- Rivals of a lookup by reference: attempts to the same recipient with the same content.
CREATE INDEX intents_by_recipient_and_content ON intents (recipient_fingerprint, content_sha256);
