-- The text a notice sent, opened on the console by an operator, every opening recorded first (issue 33).
--
-- Where the text is. The ledger holds it in the clear: intents.body and intents.subject are written
-- after the worker opened the sealed fields (herald/privacy/recipient_vault.py, open_batch), so that
-- erase_recipient (013, 016) can overwrite them with its markers; Temporal holds the same fields
-- only as `sealed:2:<fingerprint>:<key id>:...` tokens, and only until the namespace's retention.
-- So the text an operator needs for a dispute months later is the ledger's, and an erased person's
-- is already gone from it (recipient = erased_recipient(), body '', subject NULL).
--
-- Who may read it. Not herald_reader: its logins serve every page, and 022 keeps every personal
-- column out of its reach; that stays so. A second role, herald_text_opener, is given one thing:
-- EXECUTE on open_sent_text(), a function owned by the migrating role that, in one statement,
-- writes the opening (who, why, when, and what came of it) and returns the text. The role has no
-- SELECT on intents (no recipient, no body outside the function), no INSERT on text_openings (it
-- cannot write an opening without opening, or open without writing one), nothing on recipient_keys.
-- An INSERT the ledger refuses aborts the statement, so no text leaves the ledger without its row,
-- and the console shows the text only after its transaction committed.
--
-- Why not through the recipients' data keys: the ledger's copy is not sealed, so a gate on the
-- data key or the key-encryption key would guard nothing this function does not already decide;
-- the sealed copy in Temporal is gone after retention and would tie the console to the codec key.
-- Erasure decides here as it does for every copy: an erased person's text is not there to open.
--
-- herald_text_opener is created here when the migrating role may create roles (as herald_reader in
-- 022); on a server where it may not, an administrator runs `CREATE ROLE herald_text_opener NOLOGIN`
-- once and migrations go on.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'herald_text_opener') THEN
        BEGIN
            CREATE ROLE herald_text_opener NOLOGIN;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role herald_text_opener does not exist and % may not create it: '
                'as an administrator, run CREATE ROLE herald_text_opener NOLOGIN, then migrate again', current_user;
        END;
    END IF;
END;
$$;

CREATE TABLE text_openings (
    id          bigserial   PRIMARY KEY,
    -- No foreign key: an opening asked for a workflow the ledger does not hold is recorded too
    -- (outcome 'refused'), since an operator probing ids is what this table is there to show.
    workflow_id text        NOT NULL CHECK (length(workflow_id) BETWEEN 1 AND 400),
    -- Who, as the console's access gate named them (a single sign-on user, "token", "loopback").
    operator    text        NOT NULL CHECK (length(operator) BETWEEN 1 AND 200),
    -- Why, in the operator's words (a ticket, a dispute): required, bounded like ledger_purges' reasons.
    reason      text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    -- opened: the text was returned; erased: the person was erased, nothing to return;
    -- refused: no intent has this workflow id.
    outcome     text        NOT NULL CHECK (outcome IN ('opened', 'erased', 'refused')),
    opened_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE text_openings IS
    'Every opening of a sent text on the console: which workflow, who, why, when, and whether text was returned.';
-- A notice's story lists its channels' openings in order.
CREATE INDEX text_openings_by_workflow ON text_openings (workflow_id, opened_at);

-- Append-only like every audit table (012, 013): no UPDATE, no DELETE, no TRUNCATE, whoever connects.
CREATE TRIGGER text_openings_append_only BEFORE UPDATE OR DELETE ON text_openings
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
CREATE TRIGGER text_openings_no_truncate BEFORE TRUNCATE ON text_openings
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_truncate();
REVOKE ALL ON text_openings FROM PUBLIC;
-- The story page lists the openings (none of its columns is personal); the services read audit tables.
GRANT SELECT ON text_openings TO herald_reader, herald_app;

-- Records the opening and returns the text in the same statement. SECURITY DEFINER: the caller's
-- role reaches intents only through this, one workflow at a time, never its recipient.
CREATE FUNCTION open_sent_text(p_workflow_id text, p_operator text, p_reason text,
                               OUT opening_id bigint, OUT outcome text, OUT opened_at timestamptz,
                               OUT channel text, OUT body text, OUT subject text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    erased boolean;
BEGIN
    SELECT i.channel, i.recipient = erased_recipient(), i.body, i.subject
      INTO channel, erased, body, subject
      FROM intents i WHERE i.workflow_id = p_workflow_id;
    IF NOT FOUND THEN
        outcome := 'refused';
    ELSIF erased THEN
        outcome := 'erased';
        body := NULL;
        subject := NULL;
    ELSE
        outcome := 'opened';
    END IF;
    INSERT INTO text_openings (workflow_id, operator, reason, outcome)
    VALUES (p_workflow_id, p_operator, p_reason, outcome)
    RETURNING id, text_openings.opened_at INTO opening_id, opened_at;
END;
$$;
COMMENT ON FUNCTION open_sent_text(text, text, text) IS
    'The sent body and subject of one intent, returned only with its text_openings row written in the same statement.';
-- Functions are executable by PUBLIC by default: only the opener's role may call this one.
REVOKE ALL ON FUNCTION open_sent_text(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION open_sent_text(text, text, text) TO herald_text_opener;
