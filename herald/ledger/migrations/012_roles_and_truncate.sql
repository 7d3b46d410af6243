-- The ledger only grows, whoever connects.
--
-- Row triggers refuse UPDATE and DELETE, but TRUNCATE fires no row trigger, and a connection that
-- owns the tables can disable or drop any trigger. So: a statement trigger refuses TRUNCATE, and
-- the application does not connect as the owner. It connects as a login role that is a member of
-- herald_app, which may SELECT and INSERT on audit tables and nothing else: no TRUNCATE, no DDL,
-- no ALTER TABLE ... DISABLE TRIGGER. Migrations run as the owner (HERALD_MIGRATION_DATABASE_URL).
--
-- herald_app is created here when the migrating role may create roles; on a server where it may
-- not, an administrator runs `CREATE ROLE herald_app NOLOGIN` once and migrations go on from there.
-- A later migration that adds a table grants herald_app what that table needs, in the same file.

CREATE FUNCTION refuse_audit_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger table % is append-only: TRUNCATE refused', TG_TABLE_NAME;
END;
$$;

DO $$
DECLARE
    audit_table text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'herald_app') THEN
        BEGIN
            CREATE ROLE herald_app NOLOGIN;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role herald_app does not exist and % may not create it: '
                'as an administrator, run CREATE ROLE herald_app NOLOGIN, then migrate again', current_user;
        END;
    END IF;

    FOREACH audit_table IN ARRAY ARRAY[
        'intents', 'attempts', 'transitions', 'observations', 'receipt_inbox', 'receipt_outcomes',
        'receipt_rejections', 'artifacts', 'policy_versions', 'consent_evidence', 'suppression_lifts'
    ] LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT '
                       'EXECUTE FUNCTION refuse_audit_truncate()', audit_table || '_no_truncate', audit_table);
        EXECUTE format('REVOKE ALL ON %I FROM PUBLIC', audit_table);
        EXECUTE format('GRANT SELECT, INSERT ON %I TO herald_app', audit_table);
    END LOOP;
END;
$$;

-- Scheduling state, not audit: the drainer's retry schedule and the strict cooldown claims change in place.
REVOKE ALL ON receipt_redelivery, recipient_cooldowns FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON receipt_redelivery, recipient_cooldowns TO herald_app;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO herald_app;
GRANT SELECT ON schema_migrations TO herald_app;
GRANT SELECT ON intent_current_state, terminal_states, intents_without_attempt, attempts_without_provider_id,
    accepted_past_next_check, conflicting_terminal_observations, cancelled_then_delivered, unresolved_intents,
    undecided_reports, presumed_not_accepted, attempt_evidence, presumed_not_accepted_then_seen,
    duplicates_sent, suppression_evidence
    TO herald_app;
