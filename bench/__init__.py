"""Herald's benchmark: `make bench` (or `python -m bench --help`). Not a test: figures, not verdicts."""
