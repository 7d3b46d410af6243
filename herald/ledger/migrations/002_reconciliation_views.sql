-- Views that answer the reconciliation questions operators ask, straight from the append-only tables.
-- Views hold no data of their own, so they can be replaced freely in later migrations.

-- Each intent's current state: its newest transition (pending when it has none yet).
CREATE VIEW intent_current_state AS
SELECT i.workflow_id, i.business_key, i.channel, i.template_id, i.template_version, i.created_at, i.expires_at,
       coalesce(t.to_state, 'pending') AS state, t.at AS state_since, t.reason AS state_reason
  FROM intents i
  LEFT JOIN LATERAL (
        SELECT to_state, at, reason FROM transitions t
         WHERE t.workflow_id = i.workflow_id ORDER BY seq DESC LIMIT 1) t ON true;
COMMENT ON VIEW intent_current_state IS 'Latest state per intent, derived from transitions.';

CREATE VIEW terminal_states (state) AS
VALUES ('delivered'), ('undelivered'), ('unknown'), ('permanent_failure'), ('expired'), ('cancelled'), ('suppressed');
COMMENT ON VIEW terminal_states IS 'The states that end an intent (herald.lifecycle.TERMINAL_STATES).';

-- Intents recorded but never attempted (and not closed): a dispatcher that stopped, or a clock still waiting.
CREATE VIEW intents_without_attempt AS
SELECT s.* FROM intent_current_state s
 WHERE NOT EXISTS (SELECT 1 FROM attempts a WHERE a.workflow_id = s.workflow_id)
   AND s.state NOT IN (SELECT state FROM terminal_states);
COMMENT ON VIEW intents_without_attempt IS 'Open intents with no attempt yet.';

-- Attempts prepared but with no provider id observed: the crash-after-submit and timeout windows.
CREATE VIEW attempts_without_provider_id AS
SELECT a.workflow_id, a.number, a.attempt_ref, a.prepared_at, s.state
  FROM attempts a JOIN intent_current_state s ON s.workflow_id = a.workflow_id
 WHERE NOT EXISTS (SELECT 1 FROM observations o
                    WHERE o.workflow_id = a.workflow_id AND o.attempt_number = a.number
                      AND o.provider_id IS NOT NULL);
COMMENT ON VIEW attempts_without_provider_id IS 'Attempts whose provider id was never learned (unknown, refused or never sent).';

-- Accepted intents with no observation for longer than the longest poll interval (30 minutes by
-- default): polling should have looked by now, so something is stuck.
CREATE VIEW accepted_past_next_check AS
SELECT s.workflow_id, s.state_since, max(o.recorded_at) AS last_observation_at
  FROM intent_current_state s LEFT JOIN observations o ON o.workflow_id = s.workflow_id
 WHERE s.state = 'accepted'
 GROUP BY s.workflow_id, s.state_since
HAVING coalesce(max(o.recorded_at), s.state_since) < now() - interval '30 minutes';
COMMENT ON VIEW accepted_past_next_check IS 'Accepted intents whose next status check is overdue.';

-- One attempt observed in two different final statuses: a provider contradicting itself.
CREATE VIEW conflicting_terminal_observations AS
SELECT workflow_id, attempt_number, array_agg(DISTINCT provider_status ORDER BY provider_status) AS final_statuses
  FROM observations
 WHERE provider_status IN ('delivered', 'undelivered', 'failed', 'canceled') AND attempt_number IS NOT NULL
 GROUP BY workflow_id, attempt_number
HAVING count(DISTINCT provider_status) > 1;
COMMENT ON VIEW conflicting_terminal_observations IS 'Attempts with contradictory final observations.';

-- Cancelled intents whose message was delivered anyway: cancellation cannot recall a sent message.
CREATE VIEW cancelled_then_delivered AS
SELECT s.workflow_id, s.state_since AS cancelled_at, min(o.observed_at) AS delivered_observed_at
  FROM intent_current_state s JOIN observations o ON o.workflow_id = s.workflow_id
 WHERE s.state = 'cancelled' AND o.provider_status = 'delivered'
 GROUP BY s.workflow_id, s.state_since;
COMMENT ON VIEW cancelled_then_delivered IS 'Cancelled intents whose accepted attempt was later delivered.';

-- Open intents, oldest first: the head of this view is the age the alert watches.
CREATE VIEW unresolved_intents AS
SELECT s.*, now() - s.created_at AS age FROM intent_current_state s
 WHERE s.state NOT IN (SELECT state FROM terminal_states)
 ORDER BY s.created_at;
COMMENT ON VIEW unresolved_intents IS 'Intents without a terminal state, oldest first.';

-- Reports still owed a verdict, with their age: should stay near empty.
CREATE VIEW undecided_reports AS
SELECT r.id, r.provider, r.provider_message_id, r.provider_status, r.attempt_ref, r.received_at,
       now() - r.received_at AS age
  FROM receipt_inbox r
 WHERE NOT EXISTS (SELECT 1 FROM receipt_outcomes o WHERE o.inbox_id = r.id);
COMMENT ON VIEW undecided_reports IS 'Inbox rows not yet applied or ignored.';
