"""The API's filter backend: django-filter's, skipped when the request names none of the filters.

A ``FilterSet`` builds and validates a form on every request, even one without a single filter
parameter (every job list and job detail request without ``?state=``...), and then filters nothing:
an empty value leaves the queryset as it is (``Filter.filter``). Without any of its parameters the
answer is the queryset unchanged, so it is returned without building the form.
"""

from __future__ import annotations

from django_filters.rest_framework import DjangoFilterBackend


def filters_asked(request, filterset_class) -> bool:
    """Whether the request has a parameter of one of the filter set's filters (a range filter's
    widget reads ``<name>_min``, ``<name>_after``...: any parameter that starts like a filter's name
    counts as one)."""
    names = filterset_class.base_filters
    return any(key.startswith(name) for key in request.query_params for name in names)


class FilterBackend(DjangoFilterBackend):
    def filter_queryset(self, request, queryset, view):
        filterset_class = self.get_filterset_class(view, queryset)
        if filterset_class is None or not filters_asked(request, filterset_class):
            return queryset
        return super().filter_queryset(request, queryset, view)
