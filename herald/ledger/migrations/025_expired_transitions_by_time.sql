-- The console's routes page lists the newest intents that expired in the route queue over the last
-- day (herald.ledger.report.recent_expired_in_queue): a walk backwards down this index from now,
-- stopped at the day's edge or after the page's few rows, however large the ledger grows. Without
-- it every page load read every transition. Partial: only expiries are ever listed this way, so the
-- index holds a small share of the table and costs the append-only writes next to nothing. The
-- report's count of expiries in the queue over its window is a range read on it too.
-- Built once (the table is locked for that time: on a large ledger, in a deploy window, as 016).
CREATE INDEX transitions_expired_by_at ON transitions (at) WHERE to_state = 'expired';
