"""A local SendGrid stand-in (SMTP relay + Signed Event Webhook) with fault injection, for tests and demos only."""
