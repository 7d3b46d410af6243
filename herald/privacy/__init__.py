"""Privacy: naming a person without naming them, and forgetting them.

Keyed fingerprints, the per-recipient data keys that seal personal fields in Temporal's copy (wrapped
by key-encryption keys the ledger never holds), the payload codec, erasure's reach into Temporal, and
the signed one-click unsubscribe tokens.
"""
