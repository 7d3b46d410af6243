-- Silence is evidence only while the event stream is flowing (issue 20), and an outage is not a verdict.
--
-- An e-mail whose submit outcome is unknown has no lookup (SMTP has none) unless the ESP sells one;
-- its events are the only evidence. Their absence proves "not accepted" only if the ESP's event
-- stream is demonstrably live and has moved past the attempt: events have arrived for submissions
-- made after it, posted as they happened, and nothing shows that the stream was interrupted while
-- the attempt's own events would have been posted. The receipt server records what it needs to tell
-- (one row per verified post), and the workflow reads it: the decision is a read of recorded facts.

-- One row per verified event post from an ESP, written in the transaction that stores its events.
-- `received_at - newest_event_at` is how long the post waited after its last event happened: a
-- few seconds to a minute for a post made as events happen (SendGrid batches for about 30 s), far
-- more for a post the ESP redelivered after a failure (SendGrid retries for 24 hours). So a late
-- row marks an interruption over the event times it covers, and a fresh row naming a later
-- submission shows the stream live past an attempt.
CREATE TABLE event_stream_marks (
    id                   bigserial   PRIMARY KEY,
    provider             text        NOT NULL,
    -- The ESP's own times of the oldest and newest event in the post (SendGrid's `timestamp`).
    oldest_event_at      timestamptz NOT NULL,
    newest_event_at      timestamptz NOT NULL CHECK (newest_event_at >= oldest_event_at),
    -- The newest attempts.prepared_at among the attempts the post's events name (NULL: none of ours
    -- is in the ledger): how far the stream has moved through our submissions.
    newest_submission_at timestamptz,
    events               integer     NOT NULL CHECK (events >= 1),
    received_at          timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE event_stream_marks IS
    'One row per verified ESP event post: when it arrived, which event times and submissions it covered.';
-- "Has a fresh post named a submission made after T?" and "when did the stream last speak?"
CREATE INDEX event_stream_marks_by_submission ON event_stream_marks (provider, newest_submission_at);
CREATE INDEX event_stream_marks_by_received ON event_stream_marks (provider, received_at);
-- "Did a late post cover the event times around T?"
CREATE INDEX event_stream_marks_by_event_time ON event_stream_marks (provider, newest_event_at);

CREATE TRIGGER event_stream_marks_append_only BEFORE UPDATE OR DELETE ON event_stream_marks
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
CREATE TRIGGER event_stream_marks_no_truncate BEFORE TRUNCATE ON event_stream_marks
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_truncate();
REVOKE ALL ON event_stream_marks FROM PUBLIC;
GRANT SELECT, INSERT ON event_stream_marks TO herald_app;
GRANT USAGE ON SEQUENCE event_stream_marks_id_seq TO herald_app;

-- A fourth way Herald concludes the provider never took an attempt: the submit reached no provider
-- at all (connection refused, an SMTP session lost before DATA, a 429). Like the others it opens the
-- way to another attempt, so it is counted if later evidence contradicts it (`provider_unreachable`).
CREATE OR REPLACE VIEW presumed_not_accepted AS
SELECT DISTINCT ON (o.workflow_id, o.attempt_number)
       o.workflow_id, o.attempt_number,
       CASE WHEN o.kind = 'retryable' THEN 'submit_refused'
            WHEN o.kind = 'unreachable' THEN 'provider_unreachable'
            WHEN o.kind = 'no_evidence' THEN 'events_absent'
            ELSE 'lookup_not_found' END AS cause,
       o.observed_at AS presumed_at
  FROM observations o
 WHERE o.attempt_number IS NOT NULL AND o.applied
   AND ((o.source = 'submit' AND o.kind IN ('retryable', 'unreachable')) OR (o.source = 'poll' AND o.kind = 'not_found')
        OR (o.source = 'clock' AND o.kind = 'no_evidence'))
 ORDER BY o.workflow_id, o.attempt_number, o.seq;
