"""Temporal plumbing: the one place a client is made, the workflow's names, task queues, traces, the
route's backlog as the server reports it."""
