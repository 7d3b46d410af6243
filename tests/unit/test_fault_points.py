"""The fault-matrix crash points (devstack/fault_points.py): read from their variables, refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack.fault_points import FaultPoint, InvalidFaultPoint, from_environment

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("HERALD_FAULT_POINT", "crash_everywhere",
         "must be one of before_provider_call, after_provider_accepted, outbox_before_start, outbox_after_start"),
        ("HERALD_FAULT_POINT_MARKER", str(HERE), "must be a file path, not a directory"),
    ],
)  # fmt: skip
def test_a_bad_fault_variable_is_refused_in_one_line_naming_it(name: str, value: str, rule: str) -> None:
    """A fault point or marker that cannot work is refused as `NAME: rule`."""
    with pytest.raises(InvalidFaultPoint) as refused:
        from_environment({name: value})
    assert str(refused.value) == f"{name}: {rule}"


def test_unset_or_blank_variables_arm_nothing(tmp_path: Path) -> None:
    """Without HERALD_FAULT_POINT (or with it blank) no point fires, whatever the marker says."""
    for environ in ({}, {"HERALD_FAULT_POINT": "  ", "HERALD_FAULT_POINT_MARKER": str(tmp_path / "m")}):
        faults = from_environment(environ)
        for point in FaultPoint:
            faults.hit(point)  # would SIGKILL this process if armed
    assert not (tmp_path / "m").exists()


def test_a_marker_that_exists_disarms_the_point(tmp_path: Path) -> None:
    """The marker makes the crash happen once: a restarted process finds it and goes on."""
    marker = tmp_path / "crashed-once"
    marker.touch()
    faults = from_environment({"HERALD_FAULT_POINT": "before_provider_call", "HERALD_FAULT_POINT_MARKER": str(marker)})
    faults.hit(FaultPoint.BEFORE_PROVIDER_CALL)  # alive: the marker says it already fired
