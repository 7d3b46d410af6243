"""The operator's console: a notice's whole story, the routes at a glance and filtered lists, read-only over the ledger (``python -m herald.console``)."""
