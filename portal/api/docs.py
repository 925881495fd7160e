"""Who may read the OpenAPI schema and its docs pages: ``API_DOCS`` = public, authenticated or off.

Read at request time, so the setting can differ per deployment (off by default with DEBUG=0)."""

from __future__ import annotations

from django.conf import settings
from rest_framework.exceptions import NotFound
from rest_framework.permissions import BasePermission


class ApiDocsPermission(BasePermission):
    def has_permission(self, request, view) -> bool:
        mode = settings.API_DOCS
        if mode == "off":
            raise NotFound("the API schema is not published here (API_DOCS=off)")
        return mode == "public" or bool(request.user and request.user.is_authenticated)
