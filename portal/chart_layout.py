"""The layout every portal chart shares (dashboard, cost pages, what-if), in one place.

The legend hangs below the x axis's tick labels (two lines for dates: plotly's default legend place
overlapped them), and plotly grows the bottom margin to hold it. Only the height differs per page.

A time axis (``TIME_AXIS``) writes its ticks short enough never to be turned: plotly's default labels
("00:00" over "Nov 28, 2026") are ~85 px wide, so on a 700 px chart of two days (ticks six hours apart)
plotly turned them 30 degrees, and the turned labels ran into each other and into the legend below.
"""

from __future__ import annotations

_DAY_MS = 24 * 3600 * 1000

# Plotly's ``tickformatstops``: ticks under a day apart show the time over the day (plotly writes the
# day only where it changes); a day or more apart, the day alone.
TIME_AXIS: dict[str, object] = {
    "tickformatstops": [
        {"dtickrange": [None, _DAY_MS - 1], "value": "%H:%M\n%b %-d"},
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
