"""The README's map of the code ("Where the code is") is the packages' own first sentences, in layer order.

Each row names a place and says its one job in the words of that place's docstring, so the map
cannot drift from the code: a new package without a docstring, a docstring changed without the
README, or a README row for a place that is gone fails here, and the message holds the table to
paste.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.unit.test_layers import LAYERS

ROOT = Path(__file__).resolve().parents[2]
BEGIN = "<!-- map: generated from each place's docstring; tests/unit/test_readme_map.py holds it -->"
END = "<!-- /map -->"
# Places outside the product, after it, in this order.
TOOLING = ["agent_tool", "devstack", "emulator", "soak", "bench"]


def first_paragraph(path: Path) -> str:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(docstring.split("\n\n")[0].split())


def places() -> list[tuple[str, Path]]:
    """(shown name, file holding its docstring), the product's bottom layer first, then the tooling."""
    found: list[tuple[int, str, Path]] = []
    for name, layer in LAYERS.items():
        path = ROOT / name.replace(".", "/")
        if path.is_dir():
            found.append((layer, f"`{name.replace('.', '/')}/`", path / "__init__.py"))
            for sub in sorted(p for p in path.iterdir() if (p / "__init__.py").is_file()):
                found.append((layer, f"`{sub.relative_to(ROOT)}/`", sub / "__init__.py"))
        else:
            found.append((layer, f"`{name.replace('.', '/')}.py`", path.with_suffix(".py")))
    ordered = [(shown, path) for _, shown, path in sorted(found, key=lambda item: (item[0], item[1]))]
    return ordered + [(f"`{name}/`", ROOT / name / "__init__.py") for name in TOOLING]


def code_map() -> str:
    rows = ["| place | layer | its one job, in its own words |", "|---|--:|---|"]
    layer_of = {}
    for name, layer in LAYERS.items():
        layer_of[f"`{name.replace('.', '/')}/`"] = layer
        layer_of[f"`{name.replace('.', '/')}.py`"] = layer
    for shown, path in places():
        layer = next((str(layer) for place, layer in layer_of.items() if shown.startswith(place.rstrip("`"))), "tool")
        rows.append(f"| {shown} | {layer} | {first_paragraph(path)} |")
    return "\n".join(rows)


def test_every_place_says_its_job() -> None:
    """Every package and top-level module of the map has a docstring that says what it is for."""
    missing = [shown for shown, path in places() if not first_paragraph(path)]
    assert not missing, f"no docstring: {missing}"


def test_the_readme_map_is_the_places_own_words() -> None:
    """The README's table between the map markers is exactly the generated one."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), readme, re.DOTALL)
    assert found is not None, f"README.md has no map between {BEGIN} and {END}"
    expected = code_map()
    assert found.group(1) == expected, "README.md's map differs from the code; paste this:\n" + expected
