-- Artifacts an e-mail carries as attachments (a generated report, an invoice), stored by content.
-- An intent names an artifact by its SHA-256 and size, never by its bytes: Temporal history keeps
-- only that small reference, and the submit activity loads the bytes and checks them against it
-- right before it builds the message. The key is the content's own hash, so storing the same
-- bytes twice is one row (the first filename and media type stay), and a retried put is a no-op.
CREATE TABLE artifacts (
    sha256     text        PRIMARY KEY,
    -- Lowercase hex only, so one content has exactly one spelling of its key.
    CONSTRAINT artifacts_sha256_is_lowercase_hex CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size_bytes bigint      NOT NULL,
    CONSTRAINT artifacts_size_not_negative CHECK (size_bytes >= 0),
    -- The recorded size is the content's size: a row cannot claim one length and hold another,
    -- even if someone with database access disables the append-only trigger.
    CONSTRAINT artifacts_size_is_content_size CHECK (size_bytes = octet_length(content)),
    -- Same rule as herald.artifacts.ArtifactRef, so every stored row can be described by one.
    media_type text        NOT NULL,
    CONSTRAINT artifacts_media_type_is_type_slash_subtype CHECK (media_type ~ '^[a-z0-9.+-]+/[a-z0-9.+-]+$'),
    filename   text        NOT NULL,  -- what the recipient sees; may name a person, so never logged
    content    bytea       NOT NULL,
    stored_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE artifacts IS 'Immutable attachment contents keyed by their SHA-256; append-only.';
COMMENT ON COLUMN artifacts.sha256 IS 'SHA-256 of content, lowercase hex: the key an intent names.';
COMMENT ON COLUMN artifacts.size_bytes IS 'Length of content in bytes, checked against the intent before sending.';
COMMENT ON COLUMN artifacts.media_type IS 'MIME type of the first put of this content; later puts of the same bytes keep it.';
COMMENT ON COLUMN artifacts.filename IS 'Attachment filename of the first put of this content; later puts of the same bytes keep it.';
COMMENT ON COLUMN artifacts.content IS 'The bytes, at most herald.artifacts.MAX_ARTIFACT_BYTES.';

-- A sent attachment must stay what it was: refuse UPDATE and DELETE like every ledger audit table
-- (refuse_audit_rewrite is defined in 001_ledger.sql).
CREATE TRIGGER artifacts_append_only BEFORE UPDATE OR DELETE ON artifacts
    FOR EACH ROW EXECUTE FUNCTION refuse_audit_rewrite();
