"""Herald: durable, exact transactional notification delivery on Temporal.

The pure domain (intents, states, outcomes, policies) lives here beside the
infrastructure adapters (ledger, providers, receipts); workflows and activities
import from it.
"""
