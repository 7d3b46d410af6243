-- The policy gate runs inside every submit: its reads must use indexes, not scan the ledger.

-- Suppression evidence found by the recipient (indexed below) rather than by a fingerprint computed
-- over every intent. The recipient column is for that lookup only; reports show the fingerprint.
CREATE OR REPLACE VIEW suppression_evidence AS
SELECT encode(sha256(convert_to(i.recipient, 'UTF8')), 'hex') AS recipient_fingerprint, i.channel,
       'opt_out' AS cause, 'Twilio 21610' AS detail, o.observed_at AS seen_at, i.recipient
  FROM observations o JOIN intents i ON i.workflow_id = o.workflow_id
 WHERE i.channel = 'sms' AND o.error_code = 21610
UNION ALL
SELECT encode(sha256(convert_to(i.recipient, 'UTF8')), 'hex'), i.channel,
       CASE r.provider_status WHEN 'spamreport' THEN 'complaint' ELSE 'hard_bounce' END,
       r.provider || ' ' || r.provider_status, r.received_at, i.recipient
  FROM receipt_inbox r
  JOIN attempts a ON a.attempt_ref = r.attempt_ref
  JOIN intents i ON i.workflow_id = a.workflow_id
 WHERE i.channel = 'email'
   AND (r.provider_status = 'spamreport' OR (r.provider_status = 'bounce' AND coalesce(r.error_code, 500) >= 500));

-- (attempts and observations are found by workflow_id through their primary or unique keys.)
CREATE INDEX intents_by_recipient ON intents (recipient, channel);
