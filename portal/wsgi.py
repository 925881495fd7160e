import importlib
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()
# Chart pages build plotly figures; importing plotly's figure classes takes about a second, paid here
# when a worker starts rather than by the first user to open a chart page.
importlib.import_module("plotly.graph_objects")
