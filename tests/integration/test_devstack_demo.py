"""`python -m devstack demo` (the launcher's, no longer `starter.py demo`) as a process: a stack that is not
there is one line and exit 1, never the interpreter's abort at exit.

Before its Temporal runtime was its own and stopped before exit, 3 runs in 10 with Temporal refusing
ended in "Fatal Python error: PyGILState_Release" (exit 134): the abort `starter.py` had
(herald.runtime.process.ProcessRuntime explains it).
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNS = 8


def test_the_demo_with_temporal_away_is_one_line_and_exit_1_every_time(tmp_path: Path) -> None:
    """Eight runs with Temporal refusing: each exits 1 with the one line naming HERALD_TEMPORAL_ADDRESS."""
    keys = tmp_path / "keys"
    keys.write_text(f"k:{base64.b64encode(secrets.token_bytes(32)).decode()}\n")
    (tmp_path / "stack.env").write_text("")  # not this checkout's `.state/stack.env`, which may hold a real stack
    env = {name: value for name, value in os.environ.items() if not name.startswith(("HERALD_", "TEMPORAL_"))}
    env |= {"HERALD_TEMPORAL_ADDRESS": "127.0.0.1:1", "HERALD_ENV_FILE": str(tmp_path / "stack.env"),
            "HERALD_FINGERPRINT_KEY_FILES": str(keys)}  # fmt: skip
    for _ in range(RUNS):
        ran = subprocess.run([sys.executable, "-m", "devstack", "demo"], cwd=REPO_ROOT, env=env,
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert (ran.returncode, ran.stderr) == (
            1, "error: cannot reach Temporal at 127.0.0.1:1 (HERALD_TEMPORAL_ADDRESS): Connection refused\n"
        )
