"""The console's page parts: markup escaped by construction, delays as operators read them, the SVG chart, masks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from herald.console.chart import Point, Series, line_chart, nice_ceiling
from herald.console.markup import Markup, el, fragment
from herald.console.pages import WebUi, delay
from herald.core.recipients import RecipientRefused
from herald.privacy.masked import masked_recipient, short_fingerprint

HOSTILE = '<script>alert("x")</script>&"\''


def test_text_and_attribute_values_are_escaped_and_only_markup_passes_as_it_is() -> None:
    """A string child or attribute holding markup comes out as text; el's own output nests unescaped."""
    page = el("p", HOSTILE, el("a", "link", href=f"/x?{HOSTILE}"), title=HOSTILE, class_="c")
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page  # the attribute, quotes escaped
    assert '&lt;script&gt;alert("x")&lt;/script&gt;' in page  # the text
    assert page.startswith('<p title="') and ' class="c">' in page and "<a href=" in page
    assert fragment("a", ["b", el("br")], None, 3) == "ab<br>3"
    assert isinstance(el("td", Markup("<b>kept</b>")), Markup) and "<b>kept</b>" in el("td", Markup("<b>kept</b>"))


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.04, "0.0 s"),
        (1.5, "1.5 s"),
        (59.94, "59.9 s"),
        (65, "1 min 05 s"),
        (3599, "59 min 59 s"),
        (5400, "1.5 h"),
        (-2, "-2.0 s"),
    ],
)
def test_a_delay_reads_in_the_unit_that_fits(seconds: float, shown: str) -> None:
    """Tenths of a second below a minute, minutes and seconds below an hour, hours above."""
    assert delay(seconds) == shown == delay(timedelta(seconds=seconds))


@pytest.mark.parametrize(("value", "top"), [(0, 1.0), (0.3, 0.5), (1, 1), (1.01, 2), (7, 10), (10.2, 20), (420, 500)])
def test_the_charts_axis_tops_at_one_two_or_five_times_a_power_of_ten(value: float, top: float) -> None:
    """The y axis ends at the first 1, 2 or 5 x 10^k at or above the largest value."""
    assert nice_ceiling(value) == pytest.approx(top)


def test_a_chart_draws_each_series_with_its_figures_and_escapes_their_names() -> None:
    """One polyline per series of two or more points, a titled circle per point, names escaped; empty says so."""
    start = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
    points = [Point(at=start + timedelta(minutes=m), seconds=s, note=f"{m} attempts") for m, s in ((5, 1.2), (20, 7.5))]
    chart = line_chart("queue age", [Series(name=f"tenant {HOSTILE}", points=points),
                                     Series(name="priority 1", points=points[:1])], start=start, end=start + timedelta(hours=1))  # fmt: skip
    assert chart.startswith("<svg") and 'viewBox="0 0 760 260"' in chart and "<script>" not in chart
    assert chart.count("<polyline") == 1 and chart.count("<circle") == 3
    assert "<title>priority 1: 1.2 s at 10:05 UTC (5 attempts)</title>" in chart
    assert ">10.0 s</text>" in chart  # the axis's top, above 7.5 s
    empty = line_chart("queue age", [], start=start, end=start + timedelta(hours=1))
    assert "no attempt answered in this window" in empty and "<polyline" not in empty


def test_web_ui_links_encode_the_workflow_id() -> None:
    """A workflow id's ':' and '/' are encoded in the Web UI's addresses; the list is filtered by the id."""
    ui = WebUi(base_url="https://temporal.example.com", namespace="prod")
    assert (
        ui.run("order:1/sms", "r1")
        == "https://temporal.example.com/namespaces/prod/workflows/order%3A1%2Fsms/r1/history"
    )
    assert ui.runs("order:1/sms") == (
        "https://temporal.example.com/namespaces/prod/workflows?query=WorkflowId%3D%22order%3A1%2Fsms%22"
    )


@pytest.mark.parametrize(
    ("typed", "shown"),
    [
        ("+15551230001", "+15•••01"),
        ("+1 (555) 123-0001", "+15•••01"),
        ("Seller@Example.COM", "s•••@e•••.com"),
        ("ops@localhost", "o•••@l•••"),
    ],
)
def test_a_recipient_is_shown_masked_in_its_canonical_form(typed: str, shown: str) -> None:
    """Two characters at each end of a number, the first letters and top-level domain of an address."""
    assert masked_recipient(typed) == shown


def test_a_spelling_no_door_accepts_is_refused_not_masked() -> None:
    """A number every door refuses is RecipientRefused, never masked into another person."""
    with pytest.raises(RecipientRefused):
        masked_recipient("+1555123\n")


def test_a_fingerprint_is_shown_by_its_key_and_first_digits() -> None:
    """`key:hex` keeps its key id and 12 hex digits; a bare SHA-256 its first 12."""
    assert short_fingerprint("session:" + "ab" * 32) == "session:abababababab…"
    assert short_fingerprint("cd" * 32) == "cdcdcdcdcdcd…"
