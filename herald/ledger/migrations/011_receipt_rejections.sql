-- Signed reports that can never become inbox rows (a 10 KB sid, an error code no integer holds,
-- a NUL byte, a required field missing). They are the provider's words, verified, so they are
-- kept with the rule they broke; the provider is answered 2xx, because redelivering the same
-- bytes can never succeed and would otherwise go on for as long as the provider retries.
CREATE TABLE receipt_rejections (
    id          bigserial   PRIMARY KEY,
    provider    text        NOT NULL,
    reason      text        NOT NULL,   -- the field and the rule, never the value
    -- The signed form minus recipient, sender and body, each value cut to 256 characters with
    -- NUL escaped, so even the row that holds the bad value can be stored and read.
    fields      jsonb       NOT NULL,
    attempt_ref text,
    received_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE receipt_rejections IS 'Verified provider reports that broke a storage rule, with the rule; answered 2xx.';
CREATE TRIGGER receipt_rejections_append_only BEFORE UPDATE OR DELETE ON receipt_rejections
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
