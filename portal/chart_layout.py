"""The layout every portal chart shares (dashboard, cost pages, what-if), in one place.

The legend hangs below the x axis's tick labels (two lines for dates: plotly's default legend place
overlapped them), and plotly grows the bottom margin to hold it. Only the height differs per page.
"""

from __future__ import annotations


def chart_layout(height: int = 340) -> dict[str, object]:
    """Plotly layout keywords: margins, height and the legend below the axis."""
    return {
        "margin": {"l": 55, "r": 20, "t": 50, "b": 40},
        "height": height,
        "legend": {"orientation": "h", "y": -0.18, "yanchor": "top", "x": 0, "xanchor": "left"},
    }
