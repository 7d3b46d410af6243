"""How every Herald process logs: one format, and no personal data from the libraries underneath.

Herald's own log lines carry fingerprints, ids and rules, never a number, an address or a body.
Libraries are not so careful: httpx logs every request URL at INFO (a reference lookup's URL holds
``To=%2B1555...``), uvicorn's access log holds query strings, aiosmtplib and mcp log envelopes and
messages at DEBUG/INFO. Those loggers are held at WARNING, whatever level Herald's own run at.
"""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"

# Loggers that print request URLs, envelopes or bodies at INFO or below.
TALKATIVE_LIBRARIES = ("httpx", "httpcore", "uvicorn.access", "aiosmtplib", "mcp", "hpack", "urllib3")


def configure_logging(level: int = logging.INFO) -> None:
    """Herald's loggers at ``level``; the talkative libraries at WARNING, so their URLs never reach a log."""
    logging.basicConfig(level=level, format=FORMAT)
    for name in TALKATIVE_LIBRARIES:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
