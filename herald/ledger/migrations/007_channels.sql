-- Two channels behind one provider port (issue 9). Metadata-only changes: no existing row is rewritten.

-- The route an attempt went through (the account and sender, or the relay), beside its provider.
ALTER TABLE attempts ADD COLUMN route text;
COMMENT ON COLUMN attempts.route IS 'Account and sender, or relay, the attempt was handed to; NULL: never handed over (or before 007).';

-- An e-mail intent's subject and the artifact it attaches (by content hash and size, never the bytes).
ALTER TABLE intents ADD COLUMN subject text;
ALTER TABLE intents ADD COLUMN attachment_sha256 char(64);
ALTER TABLE intents ADD COLUMN attachment_size bigint;
COMMENT ON COLUMN intents.attachment_sha256 IS 'SHA-256 of the artifact the e-mail attaches (artifacts.sha256); the bytes sent were verified against it.';

-- `relayed`: an SMTP relay without delivery events accepted the message; nothing more can be known.
CREATE OR REPLACE VIEW terminal_states (state) AS
VALUES ('delivered'), ('undelivered'), ('unknown'), ('permanent_failure'), ('expired'), ('cancelled'), ('suppressed'),
       ('relayed');

-- A third way Herald concludes the provider never took an attempt: an e-mail submit whose outcome
-- was unknown, with no event carrying its reference within the evidence window (`events_absent`).
-- Like the other two it opens the way to another attempt, so it is counted if later evidence
-- contradicts it.
CREATE OR REPLACE VIEW presumed_not_accepted AS
SELECT DISTINCT ON (o.workflow_id, o.attempt_number)
       o.workflow_id, o.attempt_number,
       CASE WHEN o.kind = 'retryable' THEN 'submit_refused'
            WHEN o.kind = 'no_evidence' THEN 'events_absent'
            ELSE 'lookup_not_found' END AS cause,
       o.observed_at AS presumed_at
  FROM observations o
 WHERE o.attempt_number IS NOT NULL AND o.applied
   AND ((o.source = 'submit' AND o.kind = 'retryable') OR (o.source = 'poll' AND o.kind = 'not_found')
        OR (o.source = 'clock' AND o.kind = 'no_evidence'))
 ORDER BY o.workflow_id, o.attempt_number, o.seq;
