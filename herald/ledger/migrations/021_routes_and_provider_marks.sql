-- Routes as versioned policy, and failover only on proof (issue 31).
--
-- The send policy names each SMS route's providers in order (policy_versions.rules.sms_routes);
-- the submit activity chooses one inside the transaction that admits the attempt and records why
-- on the attempt row, before the provider hears of it. Whether a provider is in outage is read
-- from what submits saw across all intents: herald/core/routes.py holds the rule and its numbers.

-- Why the attempt went to its provider: the route and its version's order, a pin to an earlier
-- attempt's provider, providers skipped in outage or moved last for this intent, a probe.
ALTER TABLE attempts ADD COLUMN route_reason text;
COMMENT ON COLUMN attempts.route_reason IS
    'Why the route chose attempts.provider (pinned, demoted, outage skipped, probe); NULL before 021.';

-- What submits told about their provider, appended by the submit activity:
--   unreachable  no provider answer (refused connection, DNS, TLS, 429): always marked;
--   answered     a provider answer (accepted, "not now", refused): marked only while the provider
--                is watched (in outage, or an Unreachable within the outage window), so a healthy
--                provider's submits write nothing here;
--   probe        an attempt routed to a provider in outage to see whether it is back, claimed in
--                the admitting transaction (one at a time, under an advisory lock per provider).
-- A lost answer (a timeout) is never marked: it says nothing about whether the provider is up.
CREATE TABLE provider_marks (
    id          bigserial   PRIMARY KEY,
    provider    text        NOT NULL,
    mark        text        NOT NULL CHECK (mark IN ('unreachable', 'answered', 'probe')),
    -- The attempt whose submit (or probe) this is.
    attempt_ref text        NOT NULL,
    marked_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE provider_marks IS
    'Submit answers per provider while it is watched, and probes: the outage rule''s evidence; append-only.';
-- Every admitted SMS attempt reads its route's providers' newest marks.
CREATE INDEX provider_marks_newest ON provider_marks (provider, marked_at DESC);

CREATE TRIGGER provider_marks_append_only BEFORE UPDATE OR DELETE ON provider_marks
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
CREATE TRIGGER provider_marks_no_truncate BEFORE TRUNCATE ON provider_marks
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_truncate();
REVOKE ALL ON provider_marks FROM PUBLIC;
GRANT SELECT, INSERT ON provider_marks TO herald_app;
GRANT USAGE ON SEQUENCE provider_marks_id_seq TO herald_app;
