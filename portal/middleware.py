"""Request guards that sit in front of every view: hostile input and database outages.

- ``HostileInputMiddleware`` refuses a NUL character in the path or the query string with a 400 that
  names where it was (PostgreSQL cannot store or compare a string holding NUL: left through, it
  becomes a server error deep inside a query).
- ``DatabaseOutageMiddleware`` turns a lost or refused database connection into a 503 with
  ``Retry-After`` (JSON under ``/api/``), not an HTML 500: clients retry instead of giving up.
  ``server_error`` (the URL conf's ``handler500``) does the same for errors raised outside a view.
"""

from __future__ import annotations

import logging
import sys

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger(__name__)

OUTAGE_ERRORS = (OperationalError, InterfaceError)


def wants_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or request.path == "/healthz"


def bad_request(request: HttpRequest, field: str, message: str) -> HttpResponse:
    if wants_json(request):
        return JsonResponse({"detail": f"invalid input: {field}: {message}", "errors": {field: [message]}}, status=400)
    return HttpResponse(f"Bad request: {field}: {message}\n", status=400, content_type="text/plain; charset=utf-8")


def outage_response(request: HttpRequest) -> HttpResponse:
    retry_after = str(settings.DB_OUTAGE_RETRY_AFTER_S)
    if wants_json(request):
        response: HttpResponse = JsonResponse(
            {"detail": "the database is unavailable; retry later", "retry_after_s": int(retry_after)}, status=503
        )
    else:
        response = HttpResponse(
            "The portal's database is unavailable. Retry in a few seconds.\n",
            status=503,
            content_type="text/plain; charset=utf-8",
        )
    response["Retry-After"] = retry_after
    response["Cache-Control"] = "no-store"
    return response


class HostileInputMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path:
            return bad_request(request, "path", "the URL path holds a NUL character")
        for key, values in request.GET.lists():
            if "\x00" in key or any("\x00" in value for value in values):
                name = key.replace("\x00", "\\x00")
                return bad_request(request, name, "the query parameter holds a NUL character")
        return self.get_response(request)


class DatabaseOutageMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, OUTAGE_ERRORS):
            logger.warning("database unavailable: %s %s: %s", request.method, request.path, exception)
            return outage_response(request)
        return None


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: a database outage raised outside a view (middleware, sessions) is a 503 too."""
    exc = sys.exc_info()[1]
    if isinstance(exc, OUTAGE_ERRORS):
        return outage_response(request)
    if wants_json(request):
        return JsonResponse({"detail": "server error"}, status=500)
    return HttpResponse("Server error.\n", status=500, content_type="text/plain; charset=utf-8")
