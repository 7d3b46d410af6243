-- One inbox fact per attempt. Needs PostgreSQL 15 or later (UNIQUE NULLS NOT DISTINCT).
--
-- Until now a fact was (provider, message id, status). E-mail breaks that: Herald re-sends an
-- unresolved attempt's message with the same Message-ID, so that recipients' clients fold the copies
-- into one, and the ESP reports on the Message-ID. Two attempts of one intent can then carry the same
-- Message-ID, and `delivered` for attempt 2 is a different fact from `delivered` for attempt 1: keyed
-- without the attempt, the second would be taken for a redelivery of the first and never stored.
--
-- The attempt reference joins the key. Twilio is unchanged: its reference comes from the status
-- callback URL, fixed per message, so a redelivered callback still conflicts and stays one row.
-- NULLS NOT DISTINCT keeps a report without a reference (a callback URL that lost its query) one
-- fact per (provider, message id, status), as before; with NULLs distinct, every redelivery of such
-- a report would be a new row.
--
-- The constraint keeps its name, so a receipt server still running the previous release (its
-- INSERT names the constraint) keeps storing during a rolling deploy. Every existing row satisfies
-- the new key, since it is the old key plus a column. Adding it builds the index under a lock that
-- holds inserts back meanwhile: the receipt endpoint answers 503 and the providers redeliver.
ALTER TABLE receipt_inbox DROP CONSTRAINT receipt_inbox_one_per_fact;
ALTER TABLE receipt_inbox
    ADD CONSTRAINT receipt_inbox_one_per_fact
    UNIQUE NULLS NOT DISTINCT (provider, provider_message_id, provider_status, attempt_ref);
COMMENT ON CONSTRAINT receipt_inbox_one_per_fact ON receipt_inbox IS
    'A redelivered report is one row: the same status for the same message of the same attempt (NULL reference: one per message) is one fact.';
