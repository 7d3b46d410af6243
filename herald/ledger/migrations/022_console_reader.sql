-- The operator's console (herald/console/, issue 33) reads the ledger and writes nothing.
--
-- It connects as a login that is a member of herald_reader, which may SELECT what a notice's story,
-- the lists and the routes page show, and nothing else: no INSERT, no function that writes, and not
-- the personal fields. A person's number or address, the text sent and its render data stay out of
-- the role's reach by column (intents.recipient, body, render_data, subject; the recipient column
-- of suppression_evidence; attachments' bytes and filenames; recipients' data keys), so no page, bug
-- or stolen console credential can read them: the console finds a person by the keyed fingerprint
-- the server computes from what the operator typed, and shows fingerprints and masked forms.
--
-- herald_reader is created here when the migrating role may create roles (as herald_app in 012); on
-- a server where it may not, an administrator runs `CREATE ROLE herald_reader NOLOGIN` once and
-- migrations go on. A later migration that adds a table the console reads grants herald_reader
-- SELECT on it (its columns, where some are personal), in the same file.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'herald_reader') THEN
        BEGIN
            CREATE ROLE herald_reader NOLOGIN;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role herald_reader does not exist and % may not create it: '
                'as an administrator, run CREATE ROLE herald_reader NOLOGIN, then migrate again', current_user;
        END;
    END IF;
END;
$$;

-- The intent row without the person: which notice, which template and content revision (its hash),
-- the keyed fingerprint, the tenant, the category and the clocks.
GRANT SELECT (workflow_id, business_key, channel, template_id, template_version, content_sha256, intent_fingerprint,
              created_at, expires_at, first_run_id, recorded_at, attachment_sha256, attachment_size, encoding,
              segments, category, recipient_fingerprint, tenant)
    ON intents TO herald_reader;

-- The record of what happened, whole: none of these tables holds a number, an address or a text
-- (the inbox keeps the provider's signed form minus recipient and body).
GRANT SELECT ON attempts, transitions, observations, receipt_inbox, receipt_outcomes, receipt_rejections,
    policy_versions, consent_evidence, suppression_lifts, ledger_purges, erased_suppressions, event_stream_marks,
    recipient_requests, message_claims, refused_claims, provider_marks, schema_migrations
    TO herald_reader;

-- An artifact's identity, not its bytes or its filename (which may name a person).
GRANT SELECT (sha256, size_bytes, media_type, stored_at) ON artifacts TO herald_reader;

-- The reconciliation views the report reads (they select no personal column).
GRANT SELECT ON intent_current_state, terminal_states, intents_without_attempt, attempts_without_provider_id,
    accepted_past_next_check, conflicting_terminal_observations, cancelled_then_delivered, unresolved_intents,
    undecided_reports, presumed_not_accepted, attempt_evidence, presumed_not_accepted_then_seen, duplicates_sent
    TO herald_reader;
GRANT SELECT (recipient_fingerprint, channel, cause, detail, seen_at) ON suppression_evidence TO herald_reader;

-- The console's lists page by (created_at, workflow_id), newest first, within a bounded time range:
-- a keyset walk down this index, never an OFFSET over the ledger. Built once (the table is locked
-- for that time: on a large ledger, in a deploy window, as 016).
CREATE INDEX intents_by_created ON intents (created_at, workflow_id);
