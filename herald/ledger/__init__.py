"""The PostgreSQL ledger: Herald's business record of intents, attempts, transitions and receipts.

Temporal history is the execution log and expires with retention; this ledger is
what answers audit questions in SQL years later.
"""
