"""The local stack: a real Temporal dev server, embedded PostgreSQL, the provider emulator,
the receipt server and the worker, started from ``temporal-dev.yaml`` with nothing but PyPI
packages. Used by ``make run`` and by the test suite; never by production.
"""
