"""The house in layers: every import in the product points down (or sideways within a layer), never up.

The layers, bottom first (README, "Where the code is"): the pure core; the adapters and services
above it; the public surface and the composition roots on top. A module may import from its own
layer or any layer below. The table is the architecture: a new package is placed in it, or this
test fails naming the file.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Layer of each top-level place, bottom (0) first. Packages of one layer may import each other:
# the layer test holds the direction between layers, farm-studio-style cycles are for review.
LAYERS: dict[str, int] = {
    "herald.core": 0,
    "herald.settings": 1,
    "herald.privacy": 2,
    "herald.intake": 2,
    "herald.temporal": 2,
    "herald.ledger": 3,
    "herald.providers": 3,
    "herald.runtime": 4,
    "herald.receipts": 5,
    "herald.outbox": 5,
    "herald.metrics": 5,
    "herald.codec": 5,
    "herald.console": 5,
    "herald.jobs": 5,
    "herald.client": 5,
    "herald.notice_view": 5,
    "activities": 5,
    "workflows": 6,
    "herald.cli": 6,
    "worker": 7,
    "starter": 7,
}
# Modules that run code at import in the core would be I/O: the core imports only the standard
# library and these pure third-party packages.
CORE_THIRD_PARTY = {"pydantic", "phonenumbers", "email_validator"}


def layer_of(module: str) -> tuple[str, int] | None:
    """The longest LAYERS prefix of `module`, and its layer (None: not Herald's)."""
    for name in sorted(LAYERS, key=len, reverse=True):
        if module == name or module.startswith(name + "."):
            return name, LAYERS[name]
    return None


def product_files() -> list[Path]:
    # herald/__init__.py is only the package's marker: it imports nothing.
    files = [p for p in ROOT.glob("herald/**/*.py") if p != ROOT / "herald" / "__init__.py"]
    files += [*ROOT.glob("activities/*.py"), *ROOT.glob("workflows/*.py")]
    return sorted([*files, ROOT / "worker.py", ROOT / "starter.py"])


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every absolute import in the file, lazy ones inside functions included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            # `from herald import x` names module x
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


@pytest.mark.parametrize("path", product_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_import_points_down(path: Path) -> None:
    """No product module imports from a layer above its own."""
    own = layer_of(module_name(path))
    assert own is not None, f"{path.relative_to(ROOT)} is in no layer: place its package in LAYERS"
    upward = []
    for line, module in imported(path):
        target = layer_of(module)
        if target is not None and target[1] > own[1]:
            upward.append(f"line {line}: {module} (layer {target[1]}) from {own[0]} (layer {own[1]})")
    assert not upward, f"{path.relative_to(ROOT)} imports upward:\n" + "\n".join(upward)


def test_the_core_imports_no_adapter_and_no_io() -> None:
    """The core imports only itself, the standard library and pure third-party models."""
    import sys

    stdlib = sys.stdlib_module_names
    bad = []
    for path in sorted(ROOT.glob("herald/core/**/*.py")):
        for line, module in imported(path):
            top = module.split(".")[0]
            if module.startswith("herald.core") or top in stdlib or top in CORE_THIRD_PARTY or module == "herald":
                continue
            bad.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert not bad, "the core imports beyond itself:\n" + "\n".join(bad)


def test_flat_herald_keeps_only_the_public_surface() -> None:
    """At most eight modules lie flat in herald/; everything else lives in a package of its layer."""
    flat = sorted(p.name for p in (ROOT / "herald").glob("*.py"))
    assert len(flat) <= 8, flat
