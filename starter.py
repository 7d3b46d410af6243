"""Herald's command line for services and operators: ``python starter.py --help``.

The commands live in ``herald/cli/commands.py``; this file is the entry point beside ``worker.py``.
"""

from __future__ import annotations

import sys

from herald.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
