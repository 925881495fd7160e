"""Template filters for the figures pages show: durations, money, GPU-hours.

Rounding is for reading only: each filter's output is the exact figure rounded half-even, and pages
put the exact figure (6 decimals) in the element's ``title``.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

from django import template

register = template.Library()


@register.filter
def duration(seconds: float | int | None) -> str:
    """``45 s``, ``12 min``, ``1 h 05 min``, ``2 d 3 h``; an em dash for nothing."""
    if seconds is None:
        return "—"
    total = round(float(seconds))
    if total < 60:
        return f"{total} s"
    minutes, _ = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def _places(value: Decimal, places: int) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)


@register.filter
def usd(value: Decimal | None) -> str:
    """``$12.35``; under a dollar four decimals (``$0.0010``), so a short run does not read ``$0.00``."""
    if value is None:
        return "—"
    value = Decimal(value)
    return f"${_places(value, 2 if abs(value) >= 1 else 4):,}"


@register.filter
def hours(value: Decimal | None) -> str:
    """GPU-hours: two decimals, four under 1 (``0.0083``)."""
    if value is None:
        return "—"
    value = Decimal(value)
    return f"{_places(value, 2 if abs(value) >= 1 else 4):,}"


@register.filter
def get_item(mapping: dict, key: str):
    """``mapping[key]`` in a template (``""`` when absent)."""
    return mapping.get(key, "") if isinstance(mapping, dict) else ""
