-- Clients observe things too: a refused reuse of a business key with another payload is recorded
-- against the intent it collided with, so duplicate-key conflicts can be counted in SQL.
ALTER TABLE observations DROP CONSTRAINT observations_source_check;
ALTER TABLE observations ADD CONSTRAINT observations_source_check
    CHECK (source IN ('submit', 'poll', 'report', 'operator', 'clock', 'ledger', 'client'));
