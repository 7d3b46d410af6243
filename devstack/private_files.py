"""The state folder's files that hold secrets: readable and writable by their owner alone (0600).

    stack.env ............... every HERALD_* variable of the stack: the services' and the relay's
                              database passwords, the Twilio token (rewritten on each run)
    app-login-password ...... herald_service's password (the ledger's services)
    outbox-relay-password ... herald_outbox_relay_login's password (the outbox relay)
    codec-keys .............. the payload encryption key
    key-encryption-keys ..... the key that wraps recipients' data keys (never in the ledger)
    esp-signing-key.pem ..... the ESP emulator's webhook signing key

Each is created with mode 0600 in the same call that creates it, so there is no moment when
another user of the machine can open it; a file left by an older launcher with a wider mode is
narrowed the next time the stack uses it. The folder's own mode is left alone: the embedded
PostgreSQL runs as another user where the launcher runs as root, and must reach its data folder.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

PRIVATE_MODE = 0o600


def make_private(path: Path) -> None:
    """Narrow an existing file to 0600 if any group or other bit is set."""
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        path.chmod(PRIVATE_MODE)


def create_private_once(path: Path, content: bytes) -> bool:
    """Create ``path`` with ``content`` and mode 0600 unless it exists; True if this call made it.

    O_EXCL makes one of several processes of the stack the writer; the others keep its file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # The mode given to os.open applies from creation; umask can only remove bits from it.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)
    except FileExistsError:
        make_private(path)
        return False
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    return True


def replace_private(path: Path, content: bytes) -> None:
    """Write ``content`` to ``path`` as a new 0600 file that replaces the old one whole.

    mkstemp creates its file 0600, and the rename swaps it in at once: a reader (starter.py)
    sees the old file or the new one, never a half-written one, and an old file's wider mode
    goes with it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
