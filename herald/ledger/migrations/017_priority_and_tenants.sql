-- Priority and tenants on the throttled route (issue 23).
--
-- An intent names the tenant it is for (the marketplace, seller, studio or business line): the
-- fairness key that shares a backlogged route between tenants. Intents recorded before are the
-- shared tenant's. Each attempt records where its submit stood in the route's queue: the priority
-- key it was dispatched with (from its category in the send policy in force when it was prepared,
-- or lower when the intent asked) and its tenant's fairness weight. NULL in attempts recorded
-- before, which were dispatched first come, first served.

ALTER TABLE intents ADD COLUMN tenant text NOT NULL DEFAULT 'shared';
ALTER TABLE attempts ADD COLUMN priority smallint, ADD COLUMN fairness_weight real;
CREATE INDEX intents_by_tenant ON intents (tenant, created_at);
