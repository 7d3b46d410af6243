"""Child processes of the local stack: start in their own process group, wait until ready, stop."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from herald.settings import REPO_ROOT

BIN_DIR = Path(sys.executable).parent
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: on Linux, SIGTERM the child when the launcher dies, however it dies.

    Without it a SIGKILLed test run leaves its Temporal server and emulator running.
    """
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the launcher's own stop() is the only cleanup


class PortInUse(RuntimeError):
    """A port the stack needs is taken; the message names the port and the setting."""


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def require_free(host: str, port: int, setting: str) -> None:
    if not port_is_free(host, port):
        raise PortInUse(f"port {port} on {host} is already in use: change {setting} in temporal-dev.yaml")


def wait_for_port(host: str, port: int, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process {process.args[0]} exited with {process.returncode} before listening on {port}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.settimeout(0.2)
            if probe.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listened on {host}:{port} within {timeout:.0f}s")


def wait_for_temporal_health(address: str, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    """Until the Temporal frontend at `address` answers its health check as serving."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process {process.args[0]} exited with {process.returncode} before it was healthy")
        check = subprocess.run(
            [str(BIN_DIR / "temporal"), "operator", "cluster", "health", "--address", address],
            capture_output=True, timeout=max(1.0, deadline - time.monotonic()), check=False,
        )  # fmt: skip
        if check.returncode == 0 and b"SERVING" in check.stdout.upper():
            return
        time.sleep(0.2)
    raise TimeoutError(f"the Temporal frontend at {address} was not healthy within {timeout:.0f}s")


class ManagedProcess:
    """One child process; its own session, so a stop reaches everything it started."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None, log_path: Path | None = None) -> None:
        self.name = name
        self.argv = argv
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> subprocess.Popen[bytes]:
        output = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            self.argv,
            env=self.env,
            cwd=REPO_ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        return self.process

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def kill(self) -> None:
        """SIGKILL, no goodbye: the crash the fault tests need."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self, grace: float = 5.0) -> None:
        if not self.process or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=grace)
        except ProcessLookupError:
            pass
