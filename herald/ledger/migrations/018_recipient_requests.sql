-- What a recipient asked of us directly (issue 24): a keyword reply to a text (STOP, START, HELP),
-- a one-click unsubscribe from an e-mail, an ESP's unsubscribe event.
--
-- Until now Herald learnt of an opt-out only when the provider refused the next send (Twilio 21610)
-- or an ESP reported a bounce or complaint (suppression_evidence, derived). These requests are
-- facts of their own, recorded as they arrive and read by the policy gate of every attempt
-- prepared after their commit:
-- * opt_out (STOP and Twilio's other opt-out keywords) and unsubscribe suppress, like the derived
--   evidence; an unsubscribe names the one category it was for, an opt-out covers what the
--   policy's suppression_applies_to says of 'opt_out';
-- * opt_in (START, YES, UNSTOP) lifts every suppression of that channel recorded before it, as an
--   operator's lift does (Twilio lets messages through again after START);
-- * help and other replies are recorded and counted, nothing more.
--
-- Only the keyed fingerprint and the classification are kept, never the reply's text or the
-- address: nothing here is personal data in clear, so an erasure leaves these rows as they are
-- (an erased person's opt-out keeps suppressing them, as erased_suppressions does for the derived
-- evidence). One row per provider reference (the inbound MessageSid, the token's id, the ESP
-- event's id): a request posted five times is one request.

CREATE TABLE recipient_requests (
    id                    bigserial   PRIMARY KEY,
    recipient_fingerprint text        NOT NULL CHECK (length(recipient_fingerprint) BETWEEN 1 AND 200),
    channel               text        NOT NULL CHECK (channel IN ('sms', 'email')),
    request               text        NOT NULL CHECK (request IN ('opt_out', 'opt_in', 'help', 'unsubscribe', 'other')),
    -- The category an unsubscribe was for; NULL for requests about every message on the channel.
    category              text        CHECK (category IN ('transactional', 'account', 'marketing')),
    source                text        NOT NULL CHECK (source IN ('inbound_keyword', 'one_click', 'esp_event')),
    -- What was classified, without the person's words: 'keyword STOP', 'SendGrid group_unsubscribe'.
    detail                text        NOT NULL CHECK (length(detail) BETWEEN 1 AND 200),
    source_ref            text        NOT NULL CHECK (length(source_ref) BETWEEN 1 AND 200),
    requested_at          timestamptz NOT NULL,
    recorded_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT recipient_requests_once UNIQUE (source, source_ref),
    CONSTRAINT recipient_requests_unsubscribe_names_category CHECK ((request = 'unsubscribe') = (category IS NOT NULL))
);
COMMENT ON TABLE recipient_requests IS
    'Opt-outs, opt-ins, unsubscribes and help requests recipients sent us, by fingerprint; append-only.';
CREATE INDEX recipient_requests_by_recipient ON recipient_requests (recipient_fingerprint, channel, requested_at);

CREATE TRIGGER recipient_requests_append_only BEFORE UPDATE OR DELETE ON recipient_requests
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
CREATE TRIGGER recipient_requests_no_truncate BEFORE TRUNCATE ON recipient_requests
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_truncate();
REVOKE ALL ON recipient_requests FROM PUBLIC;
GRANT SELECT, INSERT ON recipient_requests TO herald_app;
GRANT USAGE ON SEQUENCE recipient_requests_id_seq TO herald_app;
