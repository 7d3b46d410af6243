"""A thin edge: the command line holds no SQL, reads no environment and imports no dev tooling; only
the settings read the environment; the keyring is a value each process builds and passes, never a
global read from the environment behind its callers; the demo is the launcher's, not the product's.
"""

from __future__ import annotations

import ast
import base64
import os
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devstack.__main__ import parse_args as devstack_args
from herald import fingerprints, key_encryption
from herald.cli.main import main as starter_main
from herald.ledger.policy_store import Standing
from herald.runtime.process import ProcessRuntime
from herald.send_policy import UNSUBSCRIBE, Category, PolicyRules
from herald.settings import InvalidSetting, load_settings
from herald.variables import ENV_FILE, environment

REPO_ROOT = Path(__file__).resolve().parents[2]
CLI = REPO_ROOT / "herald" / "cli"
# A statement, as the ledger's modules write them: a verb and the clause that makes it one.
_SQL = re.compile(r"\b(SELECT\b[\s\S]*\bFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b")


def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _environment_reads(tree: ast.Module) -> list[int]:
    """Lines that read the process's environment: os.environ, os.getenv, environ imported from os."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb", "getenvb"):
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [node.lineno for alias in node.names if alias.name in ("environ", "getenv")]
    return found


def _imported(tree: ast.Module) -> set[str]:
    """Every module a file imports, at its top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_command_line_holds_no_sql_no_environment_read_and_no_dev_tooling() -> None:
    """Every module of herald/cli/: no SQL statement in any string, no os.environ or os.getenv, no import
    of devstack (lazily or not): it reads the ledger through herald.ledger's typed queries."""
    modules = sorted(CLI.glob("*.py"))
    assert {path.name for path in modules} >= {"main.py", "parser.py", "send.py", "status.py", "suppression.py"}
    for path in modules:
        tree = _parsed(path)
        statements = [
            node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SQL.search(node.value)
        ]  # fmt: skip
        assert statements == [], f"{path.name}: SQL at lines {statements}"
        assert _environment_reads(tree) == [], f"{path.name} reads the environment"
        imported = _imported(tree)
        assert not {name for name in imported if name.split(".")[0] in ("devstack", "os")}, path.name
        assert "importlib" not in imported, path.name


def test_only_the_settings_read_the_environment() -> None:
    """In herald/, activities/, workflows/, worker.py, starter.py and agent_tool/, herald/variables.py is
    the one module that reads os.environ (the keyring and the key-encryption keys included)."""
    files = [REPO_ROOT / "worker.py", REPO_ROOT / "starter.py"]
    for package in ("herald", "activities", "workflows", "agent_tool"):
        files += sorted((REPO_ROOT / package).rglob("*.py"))
    readers = {str(path.relative_to(REPO_ROOT)) for path in files if _environment_reads(_parsed(path))}
    assert readers == {"herald/variables.py"}


def test_no_process_wide_keyring_or_key_encryption_keys_remain() -> None:
    """The keyring and the KEKs are values built from settings and passed: no install(), no global to read."""
    for module, names in ((fingerprints, ("install", "install_from", "keyring", "_installed")),
                          (key_encryption, ("install", "install_from", "installed", "_installed"))):  # fmt: skip
        assert [name for name in names if hasattr(module, name)] == [], module.__name__


def _key_file(path: Path, key_id: str) -> Path:
    path.write_text(f"{key_id}:{base64.b64encode(secrets.token_bytes(32)).decode()}\n")
    return path


def test_two_runtimes_in_one_process_fingerprint_under_their_own_keys(tmp_path: Path) -> None:
    """Each runtime's keyring is its settings' own: two in one process name one number differently, and a
    runtime whose settings name no key refuses in one line naming HERALD_FINGERPRINT_KEYS."""
    first = ProcessRuntime(load_settings({"HERALD_FINGERPRINT_KEY_FILES": str(_key_file(tmp_path / "a", "a"))}))
    second = ProcessRuntime(load_settings({"HERALD_FINGERPRINT_KEY_FILES": str(_key_file(tmp_path / "b", "b"))}))
    number = "+15551230001"
    assert first.keyring().recipient(number).startswith("a:") and second.keyring().recipient(number).startswith("b:")
    assert first.keyring() is first.keyring()  # built once
    with pytest.raises(InvalidSetting, match="^HERALD_FINGERPRINT_KEYS: required"):
        ProcessRuntime(load_settings({})).keyring()


def test_an_env_file_supplies_what_the_environment_does_not(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """HERALD_ENV_FILE's variables are read under the environment's (which win); a default file that is
    absent is no file; a named one that cannot be read is one line naming HERALD_ENV_FILE."""
    stack_env = tmp_path / "stack.env"
    stack_env.write_text("# the launcher's\nHERALD_TASK_QUEUE=from-file\nHERALD_TEMPORAL_NAMESPACE=from-file\n\n")
    for name in [name for name in os.environ if name.startswith("HERALD_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HERALD_TEMPORAL_NAMESPACE", "from-environment")
    settings = load_settings(environment(stack_env))
    assert (settings.temporal.task_queue, settings.temporal.namespace) == ("from-file", "from-environment")
    assert "HERALD_TASK_QUEUE" not in environment(tmp_path / "absent.env")
    monkeypatch.setenv(ENV_FILE, str(stack_env))
    assert environment(None)["HERALD_TASK_QUEUE"] == "from-file"
    monkeypatch.setenv(ENV_FILE, str(tmp_path / "absent.env"))
    with pytest.raises(InvalidSetting, match=f"^{ENV_FILE}: "):
        environment(stack_env)


def test_demo_is_the_launchers_command_not_the_products(capsys: pytest.CaptureFixture[str]) -> None:
    """`python starter.py demo` is no command (exit 2, one line); `python -m devstack demo` is, and checks
    its --emulator-url before playing anything."""
    with pytest.raises(SystemExit) as refused:
        starter_main(["demo"])
    assert refused.value.code == 2
    assert capsys.readouterr().err.startswith("error: python starter.py: argument COMMAND: must be one of")
    assert devstack_args(["demo", "--emulator-url", "http://127.0.0.1:8234"]).emulator_url == "http://127.0.0.1:8234"
    assert devstack_args([]).command is None  # `make run`: start the stack
    with pytest.raises(SystemExit) as bad:
        devstack_args(["demo", "--emulator-url", "ftp://host"])
    assert bad.value.code == 2


CAUSES = ("opt_out", "hard_bounce", "complaint", UNSUBSCRIBE, "blocked")


@given(
    applies=st.dictionaries(st.sampled_from(CAUSES[:3]), st.lists(st.sampled_from(list(Category)), unique=True)),
    cause=st.sampled_from(CAUSES),
    scope=st.sampled_from(list(Category)),
)
def test_what_the_command_line_says_a_report_stops_is_what_the_gate_suppresses(
    applies: dict[str, list[Category]], cause: str, scope: Category
) -> None:
    """For any policy and any evidence: `suppression list` names a category as stopped by it (rules.stopped_by)
    exactly when the gate, reading that evidence (an unsubscribe only where asked from), suppresses it."""
    rules = PolicyRules(suppression_applies_to=applies)
    seen = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    stopped = set(rules.stopped_by(cause, scope if cause == UNSUBSCRIBE else None))
    for category in Category:
        # The gate's statement returns an unsubscribe only for the category it was asked from.
        evidence = [(cause, "test", seen)] if cause != UNSUBSCRIBE or category is scope else []
        found = Standing(version=1, rules=rules, consent=True, suppressions=evidence, last_submit=None)
        assert (found.suppressed_because(category) is not None) == (category in stopped), (category, stopped)

