-- A retention floor for report payloads (issue 21).
--
-- purge_inbox_payloads() (013) took any cut-off, and the services' login may run it: a cut-off of
-- now() replaced the raw payload of every decided report at once, the provider's own words an
-- operator reads to explain a verdict ("why did this e-mail end undelivered?"). The function now
-- refuses a cut-off newer than now() - 7 days, so whoever holds EXECUTE can at worst purge what a
-- retention job of a week would have purged anyway, and a verdict questioned within its first week
-- can still be explained from the report itself. 7 days is a floor, not the period: the documented
-- daily job keeps 30.
--
-- Refused with SQLSTATE 22023 (invalid_parameter_value), the class of a bad argument, so a caller
-- tells this refusal from a database failure by its code; the message names the argument and the
-- rule, and nothing is purged or recorded.
--
-- CREATE OR REPLACE keeps the function's owner and its privileges (EXECUTE revoked from PUBLIC and
-- granted to herald_app in 013), so no GRANT is repeated here: one would undo a deployment that
-- moved EXECUTE to an operators' role as 013 suggests. SECURITY DEFINER and search_path are part
-- of the definition, not privileges, and are stated again.

CREATE OR REPLACE FUNCTION purge_inbox_payloads(p_older_than timestamptz, p_operator text, p_reason text,
                                                OUT purge_id bigint, OUT rows_purged integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    -- now() is the transaction's start, the same clock received_at was written with.
    IF p_older_than IS NULL OR p_older_than > now() - interval '7 days' THEN
        RAISE EXCEPTION USING
            ERRCODE = '22023',
            MESSAGE = 'older_than must be at least 7 days ago: report payloads are kept 7 days to explain verdicts',
            HINT = 'pass a cut-off of now() - 7 days or earlier (the retention job: --inbox-days 7 or more)';
    END IF;
    PERFORM set_config('herald.redacting', 'on', true);
    UPDATE receipt_inbox r SET payload = purged_payload()
     WHERE r.received_at < p_older_than AND r.payload <> purged_payload()
       AND EXISTS (SELECT 1 FROM receipt_outcomes o WHERE o.inbox_id = r.id);
    GET DIAGNOSTICS rows_purged = ROW_COUNT;
    PERFORM set_config('herald.redacting', 'off', true);
    INSERT INTO ledger_purges (kind, older_than, rows_affected, operator, reason)
    VALUES ('inbox_retention', p_older_than, rows_purged, p_operator, p_reason)
    RETURNING id INTO purge_id;
END;
$$;

COMMENT ON FUNCTION purge_inbox_payloads(timestamptz, text, text) IS
    'Replaces the raw payload of decided reports received before p_older_than, which must be at least 7 days ago.';
