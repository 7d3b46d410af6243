-- Templates as contracts (issue 10): what an SMS body costs, recorded with the intent.
ALTER TABLE intents ADD COLUMN encoding text CHECK (encoding IN ('GSM-7', 'UCS-2'));
ALTER TABLE intents ADD COLUMN segments integer CHECK (segments >= 1);
COMMENT ON COLUMN intents.encoding IS 'SMS: GSM-7 or UCS-2, as carriers will encode the body; NULL for e-mail (and before 008).';
COMMENT ON COLUMN intents.segments IS 'SMS: segments the body costs (herald/segments.py); NULL for e-mail (and before 008).';
