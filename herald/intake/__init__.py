"""Intake: a service's request, checked and rendered into an intent before anything starts.

Requests and notices with their rules (each refusal names the field and the rule, never the value),
versioned templates (the registry, their typed data contracts, the HTML part's safety rules), and the
errors a caller can cause.
"""
