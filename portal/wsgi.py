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
