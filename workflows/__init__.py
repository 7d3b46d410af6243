"""Temporal workflows: deterministic code only (no I/O, no wall clock, no randomness outside workflow.random())."""
