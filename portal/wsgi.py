import gc
import importlib
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()
# Chart pages build plotly figures; importing plotly's figure classes takes about a second, paid here
# when a worker starts rather than by the first user to open a chart page.
importlib.import_module("plotly.graph_objects")
# The URLconf (and the views, serializers and drf-spectacular it imports: about 2 s of CPU) is loaded
# here too, not by each worker's first requests.
get_resolver().url_patterns  # noqa: B018 - the property loads it
# What is loaded by now lives as long as the worker. Moved to the collector's permanent generation, it
# is no longer traversed by every full collection: a chart page allocates enough to trigger one about
# every other request, and that cost the 30-day cost page ~100 ms of CPU each time (bench_cost_pages'
# data, 2026-11-29, after a warm-up request: CPU per request 93-199 ms without, 100-107 ms with).
gc.collect()
gc.freeze()
