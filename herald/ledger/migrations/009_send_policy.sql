-- Send policy owned by operations (issue 10): versioned rules, consent evidence, suppression
-- derived from what the ledger already records, lifts, and the strict recipient cooldown.

-- One row per published rule set. Published once, never changed (the trigger refuses it); the
-- version in force at an instant is the one with the latest effective_from at or before it.
CREATE TABLE policy_versions (
    version        integer     PRIMARY KEY CHECK (version >= 1),
    effective_from timestamptz NOT NULL,
    owner          text        NOT NULL CHECK (length(owner) BETWEEN 1 AND 100),
    note           text        NOT NULL DEFAULT '',
    rules          jsonb       NOT NULL,  -- herald.send_policy.PolicyRules; {} is the built-in defaults
    published_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE policy_versions IS 'Published send-policy versions (starter.py policy publish); append-only.';
CREATE TRIGGER policy_versions_append_only BEFORE UPDATE OR DELETE ON policy_versions
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
-- Version 1: the built-in defaults (transactional and account urgent, marketing needs consent,
-- every country, no quiet hours, no cooldown), in force from the beginning of time.
INSERT INTO policy_versions (version, effective_from, owner, note, rules)
VALUES (1, '-infinity', 'herald', 'built-in defaults', '{}');

-- Evidence that a recipient agreed to a category of messages (append-only).
CREATE TABLE consent_evidence (
    recipient_fingerprint char(64)    NOT NULL,  -- SHA-256 of the recipient, never the recipient
    category              text        NOT NULL CHECK (category IN ('transactional', 'account', 'marketing')),
    source                text        NOT NULL CHECK (length(source) BETWEEN 1 AND 200),
    granted_at            timestamptz NOT NULL,
    recorded_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (recipient_fingerprint, category, granted_at)
);
CREATE TRIGGER consent_evidence_append_only BEFORE UPDATE OR DELETE ON consent_evidence
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();

-- Why a recipient is suppressed, derived from facts Herald already records, never written apart:
-- an SMS refused with Twilio 21610 (the recipient opted out), an e-mail hard bounce (a bounce
-- without a 4.x.x status) or a spam complaint.
CREATE VIEW suppression_evidence AS
SELECT encode(sha256(convert_to(i.recipient, 'UTF8')), 'hex') AS recipient_fingerprint, i.channel,
       'opt_out' AS cause, 'Twilio 21610' AS detail, o.observed_at AS seen_at
  FROM observations o JOIN intents i ON i.workflow_id = o.workflow_id
 WHERE i.channel = 'sms' AND o.error_code = 21610
UNION ALL
SELECT encode(sha256(convert_to(i.recipient, 'UTF8')), 'hex'), i.channel,
       CASE r.provider_status WHEN 'spamreport' THEN 'complaint' ELSE 'hard_bounce' END,
       r.provider || ' ' || r.provider_status, r.received_at
  FROM receipt_inbox r
  JOIN attempts a ON a.attempt_ref = r.attempt_ref
  JOIN intents i ON i.workflow_id = a.workflow_id
 WHERE i.channel = 'email'
   AND (r.provider_status = 'spamreport' OR (r.provider_status = 'bounce' AND coalesce(r.error_code, 500) >= 500));
COMMENT ON VIEW suppression_evidence IS 'Opt-outs, hard bounces and complaints, from observations and the receipt inbox.';

-- An operator lifting a suppression: evidence older than the lift no longer suppresses (append-only).
CREATE TABLE suppression_lifts (
    id                    bigserial   PRIMARY KEY,
    recipient_fingerprint char(64)    NOT NULL,
    channel               text        NOT NULL CHECK (channel IN ('sms', 'email')),
    lifted_at             timestamptz NOT NULL DEFAULT now(),
    operator              text        NOT NULL CHECK (length(operator) BETWEEN 1 AND 100),
    reason                text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 500)
);
CREATE TRIGGER suppression_lifts_append_only BEFORE UPDATE OR DELETE ON suppression_lifts
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();

-- Scheduling state, not audit data (like receipt_redelivery): the last submit per recipient and
-- channel, claimed in the submit's own transaction, so two workers racing cannot both pass the
-- cooldown (the row lock orders them). Updated in place.
CREATE TABLE recipient_cooldowns (
    recipient_fingerprint char(64)    NOT NULL,
    channel               text        NOT NULL,
    last_submit_at        timestamptz NOT NULL,
    workflow_id           text        NOT NULL,
    PRIMARY KEY (recipient_fingerprint, channel)
);
COMMENT ON TABLE recipient_cooldowns IS 'Last submit per recipient and channel (the strict cooldown); mutable scheduling state.';

-- Every attempt records the policy version and decision that admitted it.
ALTER TABLE attempts ADD COLUMN policy_version integer;
ALTER TABLE attempts ADD COLUMN policy_decision text;
COMMENT ON COLUMN attempts.policy_version IS 'Send-policy version that admitted the attempt; NULL before 009.';

-- Intents record their category (what consent, quiet hours and suppression are decided on).
ALTER TABLE intents ADD COLUMN category text;

-- The policy is a source of facts: its deferrals and suppressions are recorded as such.
ALTER TABLE observations DROP CONSTRAINT observations_source_check;
ALTER TABLE observations ADD CONSTRAINT observations_source_check
    CHECK (source IN ('submit', 'poll', 'report', 'operator', 'clock', 'ledger', 'client', 'policy'));
ALTER TABLE transitions DROP CONSTRAINT transitions_source_check;
ALTER TABLE transitions ADD CONSTRAINT transitions_source_check
    CHECK (source IN ('submit', 'poll', 'report', 'operator', 'clock', 'ledger', 'client', 'policy'));
