"""The layout every portal chart shares (dashboard, cost pages, what-if), in one place.

The legend hangs below the x axis's tick labels (two lines for dates: plotly's default legend place
overlapped them), and plotly grows the bottom margin to hold it. Only the height differs per page.

A time axis (``TIME_AXIS``) writes its ticks short enough never to be turned: plotly's default labels
("00:00" over "Nov 28, 2026") are ~85 px wide, so on a 700 px chart of two days (ticks six hours apart)
plotly turned them 30 degrees, and the turned labels ran into each other and into the legend below.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

_DAY_MS = 24 * 3600 * 1000

_MINUTE_MS = 60 * 1000

# Plotly's ``tickformatstops``: ticks under a day apart show the time over the day (plotly writes the
# day only where it changes); a day or more apart, the day alone; under a minute apart, the seconds.
TIME_AXIS: dict[str, object] = {
    "tickformatstops": [
        {"dtickrange": [None, _MINUTE_MS - 1], "value": "%H:%M:%S\n%b %-d"},
        {"dtickrange": [_MINUTE_MS, _DAY_MS - 1], "value": "%H:%M\n%b %-d"},
        {"dtickrange": [_DAY_MS, None], "value": "%b %-d"},
    ]
}


def chart_layout(height: int = 340) -> dict[str, object]:
    """Plotly layout keywords: margins, height and the legend below the axis."""
    return {
        "margin": {"l": 55, "r": 20, "t": 50, "b": 40},
        "height": height,
        "legend": {"orientation": "h", "y": -0.18, "yanchor": "top", "x": 0, "xanchor": "left"},
    }


ONE_TIME_SPAN = timedelta(minutes=30)


def time_axis(times: Iterable[datetime | str]) -> dict[str, object]:
    """``TIME_AXIS`` for a chart of these times. One time alone (a new portal's first sample) is shown
    in the hour around it: plotly spans a lone point a few milliseconds each way and wrote the same
    "21:26" under each of its four ticks, which read as four samples."""
    distinct = set(times)
    if len(distinct) != 1:
        return dict(TIME_AXIS)
    at = next(iter(distinct))
    at = datetime.fromisoformat(at) if isinstance(at, str) else at
    return {**TIME_AXIS, "range": [(at - ONE_TIME_SPAN).isoformat(), (at + ONE_TIME_SPAN).isoformat()]}
