"""A static-files finder for plotly's browser bundle, so pages load it as a static file.

plotly (the Python package the charts are built with) ships ``plotly.min.js`` in its package data;
this finder exposes that one file as ``vendor/plotly.min.js``. ``collectstatic`` then copies it with
the rest, whitenoise's compressed manifest storage gives it a content-hashed name and brotli/gzip
copies, and browsers cache it for good (a new plotly release gets a new name). The bundle always
matches the installed plotly, and no copy of it lives in the repository.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

BUNDLE = "plotly.min.js"
PREFIX = "vendor"


class PlotlyFinder(BaseFinder):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(Path(plotly.__file__).parent / "package_data"))
        self.storage.prefix = PREFIX  # type: ignore[attr-defined]  # collectstatic reads it

    def check(self, **kwargs) -> list:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs) -> str | list[str]:  # type: ignore[override]  # one body for both overloads
        if path == f"{PREFIX}/{BUNDLE}":
            found = self.storage.path(BUNDLE)
            return [found] if find_all else found
        return [] if find_all else ""

    def list(self, ignore_patterns) -> Iterator[tuple[str, FileSystemStorage]]:
        yield BUNDLE, self.storage
