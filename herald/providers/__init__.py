"""Provider adapters: each maps one provider API onto the typed outcomes in herald.core.outcomes."""
