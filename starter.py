"""Herald's command line for services and operators: send, status, cancel, report and the rest.

The commands live in ``herald/cli/``; this file is the entry point beside ``worker.py``. It names
the file a running local stack (``make run``) writes its variables to, so a command run in this
checkout finds that stack with nothing exported; HERALD_ENV_FILE names another, and a variable set
in the environment wins over the file's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from herald.cli.main import main

# Where `python -m devstack` writes the stack's variables (its state folder in temporal-dev.yaml).
STACK_ENV = Path(__file__).resolve().parent / ".state" / "stack.env"

if __name__ == "__main__":
    sys.exit(main(env_file=STACK_ENV))
