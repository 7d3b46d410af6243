"""A line chart as inline SVG, drawn on the server: time along the bottom, seconds up the side.

No script and no image request (the console's pages allow neither): the chart is markup in the page,
escaped like the rest (``herald.console.markup``), each point carrying its figures in a <title> a
browser shows on hover. Lines that share a key share a colour across charts of one page.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from herald.console.markup import Markup, el
from herald.console.pages import delay
from herald.core.outcomes import Frozen

# Colour-blind-safe (Okabe-Ito), one per line; an eighth line reuses the first.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 170, 28, 40


class Point(Frozen):
    at: datetime
    seconds: float
    note: str  # what the point's <title> says beside the value (how many attempts)


class Series(Frozen):
    name: str
    points: list[Point]


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above `value` (the y axis's top)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def line_chart(
    title: str, series: list[Series], *, start: datetime, end: datetime, width: int = 760, height: int = 260
) -> Markup:
    """`series` over [start, end] as one SVG; an empty chart says so instead of drawing nothing."""
    plot_w, plot_h = width - _LEFT - _RIGHT, height - _TOP - _BOTTOM
    span = max((end - start).total_seconds(), 1.0)
    top = nice_ceiling(max((p.seconds for s in series for p in s.points), default=0.0))

    def x(at: datetime) -> float:
        return round(_LEFT + plot_w * min(max((at - start).total_seconds() / span, 0.0), 1.0), 1)

    def y(seconds: float) -> float:
        return round(_TOP + plot_h * (1 - min(seconds / top, 1.0)), 1)

    parts: list[Markup] = [el("title", title), el("text", title, x=_LEFT, y=16, font_size=13, font_weight=600)]
    for step in range(5):  # horizontal grid and the y axis's labels
        value = top * step / 4
        parts.append(el("line", x1=_LEFT, x2=_LEFT + plot_w, y1=y(value), y2=y(value), stroke="#d9dee4"))
        parts.append(
            el("text", delay(value), x=_LEFT - 6, y=y(value) + 4, font_size=11, text_anchor="end", fill="#5b6673")
        )
    for step in range(7):  # the x axis's labels, UTC
        at = start + timedelta(seconds=span * step / 6)
        parts.append(el("text", at.strftime("%H:%M"), x=x(at), y=height - _BOTTOM + 16, font_size=11,
                        text_anchor="middle", fill="#5b6673"))  # fmt: skip
    parts.append(el("text", "UTC", x=_LEFT + plot_w, y=height - 6, font_size=10, text_anchor="end", fill="#5b6673"))
    drawn = [s for s in series if s.points]
    if not drawn:
        parts.append(el("text", "no attempt answered in this window", x=_LEFT + plot_w / 2, y=_TOP + plot_h / 2,
                        font_size=13, text_anchor="middle", fill="#5b6673"))  # fmt: skip
    for index, line in enumerate(drawn):
        colour = PALETTE[index % len(PALETTE)]
        points = sorted(line.points, key=lambda p: p.at)
        if len(points) > 1:
            path = " ".join(f"{x(p.at)},{y(p.seconds)}" for p in points)
            parts.append(el("polyline", points=path, fill="none", stroke=colour, stroke_width=2))
        for p in points:
            parts.append(el("circle", el("title", f"{line.name}: {delay(p.seconds)} at {p.at:%H:%M} UTC ({p.note})"),
                            cx=x(p.at), cy=y(p.seconds), r=3, fill=colour))  # fmt: skip
        legend_y = _TOP + 6 + 18 * index
        parts.append(el("line", x1=width - _RIGHT + 14, x2=width - _RIGHT + 34, y1=legend_y, y2=legend_y,
                        stroke=colour, stroke_width=3))  # fmt: skip
        parts.append(el("text", line.name, x=width - _RIGHT + 40, y=legend_y + 4, font_size=12))
    return el(
        "svg", *parts, xmlns="http://www.w3.org/2000/svg", viewBox=f"0 0 {width} {height}", width=width,
        height=height, role="img", aria_label=title, class_="chart",
    )  # fmt: skip
