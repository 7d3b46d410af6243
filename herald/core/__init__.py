"""The pure core: the intent machine and every rule it decides by, with the types it speaks.

No I/O, no Temporal, no database or HTTP client: time and randomness reach it only through the
machine's ``Clock``. It imports nothing of Herald's adapters (a test holds the direction,
``tests/unit/test_layers.py``): the ledger, the providers, the receipt server and the workflow all
stand above it and speak its types (outcomes, rows, capabilities, the intent, the contracts).
"""
