-- Duplicates Herald may have caused must be visible to its own report. A second message can only
-- come from one mistake: concluding that the provider never took an attempt (a refusal at submit,
-- or a lookup that found nothing past the proof window) when it had. These views find every such
-- conclusion that later evidence contradicted, whenever that evidence arrived: while the intent
-- was open, or after it had closed.

-- Which provider each attempt was handed to, committed in the transaction that precedes the one
-- provider call; NULL when the attempt never reached a provider (the ledger was away) or was
-- recorded before this column existed. A metadata-only change: no existing row is rewritten.
ALTER TABLE attempts ADD COLUMN provider text;
COMMENT ON COLUMN attempts.provider IS 'Provider the attempt was handed to; NULL: never handed over (or recorded before 004).';

-- Herald's own conclusions that the provider does not have an attempt, the first per attempt, with
-- its cause: `submit_refused` (a definite retryable answer to the submit) or `lookup_not_found`
-- (a lookup by reference that found nothing past the proof window). Each opened the way to
-- another attempt, so each is a possible duplicate if it was wrong.
CREATE VIEW presumed_not_accepted AS
SELECT DISTINCT ON (o.workflow_id, o.attempt_number)
       o.workflow_id, o.attempt_number,
       CASE o.kind WHEN 'retryable' THEN 'submit_refused' ELSE 'lookup_not_found' END AS cause,
       o.observed_at AS presumed_at
  FROM observations o
 WHERE o.attempt_number IS NOT NULL AND o.applied
   AND ((o.source = 'submit' AND o.kind = 'retryable') OR (o.source = 'poll' AND o.kind = 'not_found'))
 ORDER BY o.workflow_id, o.attempt_number, o.seq;
COMMENT ON VIEW presumed_not_accepted IS 'Attempts Herald concluded the provider never took, and why.';

-- Evidence that the provider had an attempt: a stored report naming its reference, or a provider
-- id observed for it (a submit answer, a lookup, a poll).
CREATE VIEW attempt_evidence AS
SELECT a.workflow_id, a.number AS attempt_number, r.provider, r.provider_status AS status,
       r.received_at AS seen_at, 'report' AS seen_by
  FROM receipt_inbox r JOIN attempts a ON a.attempt_ref = r.attempt_ref
UNION ALL
SELECT o.workflow_id, o.attempt_number, a.provider, o.provider_status, o.observed_at, o.source
  FROM observations o JOIN attempts a ON a.workflow_id = o.workflow_id AND a.number = o.attempt_number
 WHERE o.provider_id IS NOT NULL;
COMMENT ON VIEW attempt_evidence IS 'Every sign that the provider had an attempt: reports and observed provider ids.';

-- The contradicted conclusions. `copy_went_out`: the seen copy is anything but failed or canceled
-- inside the provider (queued, sent, delivered, undelivered). `later_copies`: later attempts of the
-- same intent the provider has or may have. A duplicate sent is a copy that went out while another
-- did too. `after_close`: the evidence arrived after the intent's terminal state was recorded.
CREATE VIEW presumed_not_accepted_then_seen AS
SELECT p.workflow_id, p.attempt_number, p.cause, p.presumed_at,
       coalesce(max(a.provider), max(e.provider), 'unrecorded') AS provider,
       min(e.seen_at) AS first_seen_at,
       array_agg(DISTINCT e.status ORDER BY e.status) AS seen_statuses,
       bool_or(e.status NOT IN ('failed', 'canceled')) AS copy_went_out,
       (SELECT count(*) FROM attempts later
         WHERE later.workflow_id = p.workflow_id AND later.number > p.attempt_number
           AND (EXISTS (SELECT 1 FROM attempt_evidence le
                         WHERE le.workflow_id = later.workflow_id AND le.attempt_number = later.number
                           AND le.status NOT IN ('failed', 'canceled'))
                OR EXISTS (SELECT 1 FROM observations lo
                            WHERE lo.workflow_id = later.workflow_id AND lo.attempt_number = later.number
                              AND lo.source = 'submit' AND lo.kind = 'unknown'))) AS later_copies,
       coalesce(min(e.seen_at) > (SELECT min(t.at) FROM transitions t
                                   WHERE t.workflow_id = p.workflow_id
                                     AND t.to_state IN (SELECT state FROM terminal_states)), false) AS after_close
  FROM presumed_not_accepted p
  JOIN attempt_evidence e ON e.workflow_id = p.workflow_id AND e.attempt_number = p.attempt_number
  JOIN attempts a ON a.workflow_id = p.workflow_id AND a.number = p.attempt_number
 GROUP BY p.workflow_id, p.attempt_number, p.cause, p.presumed_at;
COMMENT ON VIEW presumed_not_accepted_then_seen IS
    'Attempts presumed never taken by the provider that it had after all: the duplicates Herald could not avoid.';

CREATE VIEW duplicates_sent AS
SELECT * FROM presumed_not_accepted_then_seen WHERE copy_went_out AND later_copies > 0;
COMMENT ON VIEW duplicates_sent IS 'Contradicted conclusions whose copy went out beside another copy of the same intent.';
