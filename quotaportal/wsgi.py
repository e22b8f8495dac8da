import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "quotaportal.settings")
application = get_wsgi_application()
# Django imports the URLconf, and with it every view, on the first request: each web worker's first request
# (after every start or restart) would wait 0.5-1 s for it. A worker loads them before it accepts connections.
get_resolver().url_patterns  # noqa: B018 (reading the property imports the URLconf)
