"""One error shape for the API: ``{"errors": {field: [messages]}, "detail": "..."}`` with a 4xx status.

DRF already answers validation errors with field names; this handler adds a stable ``detail`` and
turns domain errors raised by services (``portal.jobs.services.ServiceError``) into 400/409s.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal.jobs.errors import ServiceError


def exception_handler(exc, context):
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        message = f"larger than {limit} bytes"
        return Response({"detail": f"invalid input: body: {message}", "errors": {"body": [message]}}, status=413)
    if isinstance(exc, ServiceError):
        body = {"detail": str(exc), "errors": {exc.field: [exc.message]} if exc.field else {}}
        if exc.reason is not None:
            body["reason"] = exc.reason
        return Response(body, status=exc.status_code)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(data, dict) and "detail" not in data:
        response.data = {"detail": f"invalid input: {first_error(data)}", "errors": data}
    elif isinstance(data, list):
        response.data = {"detail": "; ".join(map(str, data)), "errors": {"non_field_errors": data}}
    if response.status_code >= 500:
        response.status_code = status.HTTP_500_INTERNAL_SERVER_ERROR
    return response


def first_error(errors, path: str = "") -> str:
    """The first message of DRF's nested errors with its dotted field path: ``tolerations.0.operator: …``."""
    if isinstance(errors, dict):
        for key, value in errors.items():
            if value:
                return first_error(value, f"{path}.{key}" if path else str(key))
    elif isinstance(errors, list):
        if errors and all(not isinstance(e, dict | list) for e in errors):
            return f"{path}: {errors[0]}" if path else str(errors[0])
        for index, value in enumerate(errors):
            if value:
                return first_error(value, f"{path}.{index}" if path else str(index))
    elif errors:
        return f"{path}: {errors}" if path else str(errors)
    return path
