"""The suite's layout: every test file in a tier `make` runs, and the real stack loaded only where it is used."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# The tiers that run on the session's real stack (tests/stack.py): their conftests load it.
STACK_TIERS = {"integration", "receipts", "console", "browser"}


def _make_tiers() -> set[str]:
    (line,) = re.findall(r"^TIERS := (.+)$", (TESTS.parent / "Makefile").read_text(), re.MULTILINE)
    return set(line.split())


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        name
        for node in ast.walk(tree)
        for name in (
            [alias.name for alias in node.names] if isinstance(node, ast.Import)
            else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        )
    }  # fmt: skip


def test_every_test_file_sits_in_a_tier_that_make_runs() -> None:
    """No test file lies loose in tests/, and each folder holding tests is a tier with its `make test-<tier>`."""
    assert sorted(path.name for path in TESTS.glob("test_*.py")) == []
    holding_tests = {path.parent.relative_to(TESTS).parts[0] for path in TESTS.glob("*/**/test_*.py")}
    assert holding_tests == _make_tiers()


def test_the_root_conftest_loads_no_stack_and_only_the_stack_tiers_do() -> None:
    """tests/conftest.py imports nothing of the stack (no socket, devstack, worker or tests.stack), and the
    only conftests that load tests/stack.py are those of the tiers that run on it."""
    root = _imports(TESTS / "conftest.py")
    assert not {name for name in root if name.split(".")[0] in {"socket", "devstack", "worker", "activities"}}
    assert "tests.stack" not in root
    loading = {
        path.parent.name for path in TESTS.glob("*/conftest.py") if 'import_plugin("tests.stack")' in path.read_text()
    }
    assert loading == STACK_TIERS
