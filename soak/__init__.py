"""The soak: a seeded fault mix over many intents with worker kills, against the real local stack."""
