-- Retention for provider_marks (migration 021), which grows by one row per SMS submit while a
-- provider is watched: an hour's outage at 100 submits/s is 360,000 rows that no route decision
-- reads again. The route rule reads each provider's 8 newest marks and the report 500 (to date an
-- outage's start), so marks older than a week explain nothing the attempt rows do not: every
-- attempt keeps its own route_reason ("twilio in outage since ...; skipped").
--
-- Deleting is done by one function, like the inbox's purge (013, 015): it refuses a cut-off
-- newer than now() - 7 days (SQLSTATE 22023, naming the argument and the rule) and records each
-- run in ledger_purges. The append-only trigger lets exactly that delete through and nothing else.

-- ledger_purges learns the third kind; its checks are dropped by what they say (013 left them
-- unnamed) and stated again with names.
DO $$
DECLARE
    found record;
BEGIN
    FOR found IN SELECT conname FROM pg_constraint
                  WHERE conrelid = 'ledger_purges'::regclass AND contype = 'c'
                    AND pg_get_constraintdef(oid) LIKE '%inbox_retention%' LOOP
        EXECUTE format('ALTER TABLE ledger_purges DROP CONSTRAINT %I', found.conname);
    END LOOP;
END;
$$;
ALTER TABLE ledger_purges
    ADD CONSTRAINT ledger_purges_kind CHECK (kind IN ('erasure', 'inbox_retention', 'marks_retention')),
    -- A retention run is dated by its cut-off; an erasure by whose data it was.
    ADD CONSTRAINT ledger_purges_retention_has_cut_off
        CHECK ((kind IN ('inbox_retention', 'marks_retention')) = (older_than IS NOT NULL));

-- provider_marks' own guard in place of the common refuse_audit_rewrite() (it holds no personal
-- column to redact): append-only, but for the purge's delete of marks past the floor (checked here
-- too, so the flag alone cannot delete a fresh mark; only the purge function sets it).
CREATE FUNCTION refuse_provider_marks_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('herald.expiring_marks', true) = 'on'
       AND OLD.marked_at < now() - interval '7 days' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'ledger table % is append-only', TG_TABLE_NAME;
END;
$$;
DROP TRIGGER provider_marks_append_only ON provider_marks;
CREATE TRIGGER provider_marks_append_only BEFORE UPDATE OR DELETE ON provider_marks
    FOR EACH ROW EXECUTE FUNCTION refuse_provider_marks_rewrite();

CREATE FUNCTION purge_provider_marks(p_older_than timestamptz, p_operator text, p_reason text,
                                     OUT purge_id bigint, OUT rows_purged integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    IF p_older_than IS NULL OR p_older_than > now() - interval '7 days' THEN
        RAISE EXCEPTION USING
            ERRCODE = '22023',
            MESSAGE = 'older_than must be at least 7 days ago: provider marks are kept 7 days to explain route decisions',
            HINT = 'pass a cut-off of now() - 7 days or earlier (the retention job: --marks-days 7 or more)';
    END IF;
    PERFORM set_config('herald.expiring_marks', 'on', true);
    DELETE FROM provider_marks WHERE marked_at < p_older_than;
    GET DIAGNOSTICS rows_purged = ROW_COUNT;
    PERFORM set_config('herald.expiring_marks', 'off', true);
    INSERT INTO ledger_purges (kind, older_than, rows_affected, operator, reason)
    VALUES ('marks_retention', p_older_than, rows_purged, p_operator, p_reason)
    RETURNING id INTO purge_id;
END;
$$;
COMMENT ON FUNCTION purge_provider_marks(timestamptz, text, text) IS
    'Deletes provider marks older than p_older_than, which must be at least 7 days ago; recorded in ledger_purges.';
REVOKE ALL ON FUNCTION purge_provider_marks(timestamptz, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION purge_provider_marks(timestamptz, text, text) TO herald_app;
