"""A URL conf with one route added that leaks another team's job: the isolation sweep must catch it
without being told about the route (``test_isolation.py``)."""

from django.http import JsonResponse
from django.urls import path

from portal.jobs.models import Job
from portal.urls import urlpatterns as portal_urlpatterns


def job_name(request, pk: int):
    job = Job.objects.filter(pk=pk).first()  # no team check: the bug the sweep must find
    return JsonResponse({"name": job.name if job else None})


urlpatterns = [path("api/v1/job-names/<int:pk>/", job_name), *portal_urlpatterns]
