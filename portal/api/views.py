"""REST API views: authenticate, scope to the user's teams, call a service or selector, serialize."""

from __future__ import annotations

import hashlib
import json

import django_filters
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404, QueryDict
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.selectors import JOB_SORTS, job_cost_report, job_list_costed, job_ordering
from portal.api.answers import JobCostSerializer, check_data
from portal.api.filtering import filters_asked
from portal.api.job_create import JobCreateSerializer
from portal.api.job_rows import JobRows, job_page_rows, jobs_render, submitted_rows
from portal.api.serializers import (
    GpuModelSerializer,
    JobSerializer,
    LocalQueueSerializer,
    PriorityClassSerializer,
    QuotaUpdateSerializer,
    TeamSerializer,
)
from portal.jobs.models import ClusterQueue, GpuModel, Job, LocalQueue, PriorityClass
from portal.jobs.selectors import cluster_queue_list, job_list, local_queue_list
from portal.jobs.services import (
    idempotent_submit,
    job_cancel,
    job_check_spec,
    job_submit_recorded,
    queue_quota_update,
)
from portal.jobs.states import JobState
from portal.ops.selectors import cluster_view, queue_overview, queue_standings_now
from portal.ops.selectors.governance import below_use_warnings
from portal.tenants.models import Team
from portal.tenants.selectors import team_ids_for_user, team_list_for_user
from scheduling.selectors import capacity_wanted, runtime_speedup


class JobFilter(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)
    team = django_filters.CharFilter(field_name="team__slug")
    queue = django_filters.CharFilter(field_name="local_queue__name")
    kind = django_filters.ChoiceFilter(choices=Job.Kind.choices)

    class Meta:
        model = Job
        fields = ["state", "team", "queue", "kind"]


class JobViewSet(mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Jobs of your teams. Another team's job answers 404."""

    serializer_class = JobSerializer
    filterset_class = JobFilter

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no user
            return Job.objects.none()
        return job_list(user=self.request.user)

    def job_data(self, rows: list[dict]) -> list[dict]:
        """The API shape of job rows (``job_page_rows``) with their costs: ``JobSerializer``'s fields,
        rendered from plain rows (``portal.api.job_rows``)."""
        return jobs_render(rows, now=timezone.now(), speedup=runtime_speedup())

    def job_one(self, pk: int, jobs: QuerySet[Job] | None = None) -> dict:
        """One job of ``jobs`` (default: the user's teams') in the API shape (404 if it is not one)."""
        if jobs is None and JobRows.available():
            row = JobRows(team_ids=team_ids_for_user(user=self.request.user), ordering=()).one(pk)
            rows = [] if row is None else [row]
        else:
            jobs = self.get_queryset() if jobs is None else jobs
            rows = list(job_page_rows(jobs.filter(pk=pk)))
        if not rows:
            raise Http404("No Job matches the given query.")
        return self.job_data(rows)[0]

    def filtered(self) -> bool:
        """Whether the request asks for a filter (``JobFilter``'s parameters): else the jobs are all
        of the user's teams', read without the filter set and the ORM's query (``JobRows``)."""
        return filters_asked(self.request, self.filterset_class)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "ordering",
                str,
                description=f"Sort by one of {', '.join(JOB_SORTS)}; a leading '-' sorts descending "
                "(default: -submitted). run, gpu_hours and cost add up every attempt, running ones up to now.",
            )
        ]
    )
    def list(self, request, *args, **kwargs):
        sort, ordering = job_ordering(request.query_params.get("ordering", ""))
        costed = sort.lstrip("-") in ("run", "gpu_hours", "cost")
        rows: JobRows | QuerySet
        if not costed and not self.filtered() and JobRows.available():
            rows = JobRows(team_ids=team_ids_for_user(user=request.user), ordering=ordering)
        else:
            jobs = self.filter_queryset(self.get_queryset())
            if costed:
                jobs = job_list_costed(jobs, now=timezone.now())
            rows = job_page_rows(jobs.order_by(*ordering))
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(self.job_data(list(page or [])))

    def retrieve(self, request, *args, **kwargs):
        jobs = self.filter_queryset(self.get_queryset()) if self.filtered() else None
        return Response(self.job_one(self._lookup_pk(), jobs))

    def _lookup_pk(self) -> int:
        """The URL's job id (a 404 for anything but a number, as ``get_object`` answers)."""
        value = self.kwargs[self.lookup_url_kwarg or self.lookup_field]
        try:
            return int(value)
        except (TypeError, ValueError):
            raise Http404("No Job matches the given query.") from None

    @extend_schema(
        request=JobCreateSerializer,
        responses={201: JobSerializer},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Retry-safe submission: the same key and body within 24 h return the first job.",
            )
        ],
    )
    def create(self, request, *args, **kwargs):
        key = request.headers.get("Idempotency-Key")
        if key is None:
            status_code, body = self._submit(request)
            return Response(body, status=status_code)
        if not 1 <= len(key) <= 255 or not key.isascii() or not key.isprintable():
            raise ValidationError({"Idempotency-Key": ["must be 1-255 printable ASCII characters"]})
        data = dict(request.data.lists()) if isinstance(request.data, QueryDict) else request.data
        fingerprint = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
        status_code, body, replayed = idempotent_submit(
            owner=request.user, key=key, fingerprint=fingerprint, submit=lambda: self._submit(request)
        )
        response = Response(body, status=status_code)
        if replayed:
            response["Idempotent-Replayed"] = "true"
        return response

    def _submit(self, request) -> tuple[int, dict]:
        serializer = JobCreateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        spec = serializer.to_spec()
        # The dry run of the spec just before it is queued (what the check endpoint answers then);
        # a spec the check refuses is refused by the submission too, with the same 400.
        check = job_check_spec(spec=spec)
        job, transition = job_submit_recorded(owner=request.user, spec=spec)
        # Rendered from what the submission wrote (``job_one`` would read the same back: the
        # agreement is tested in tests/portal/api/test_submit_answer.py).
        rows, relations = submitted_rows(job, transition, [m.name for m in spec.allowed_gpu_models])
        body = jobs_render(rows, now=timezone.now(), speedup=runtime_speedup(), relations=relations)[0]
        body["check"] = check_data(check, user=request.user)
        return status.HTTP_201_CREATED, body

    @extend_schema(request=JobCreateSerializer, responses={200: dict})
    @action(detail=False, methods=["post"])
    def check(self, request):
        """Dry run: the same body as a submission; nothing is submitted. Answers what the next
        scheduling cycle decides for it on the current state (``runs_now`` with the node and GPU choice,
        ``waits`` with its position, the blocking resource with its numbers, estimated start P50 and
        P90 and whom it would preempt, or ``never`` with the limit), its estimated cost from the price
        book, and the smallest changes that start it sooner."""
        serializer = JobCreateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        result = job_check_spec(spec=serializer.to_spec())
        return Response(check_data(result, user=request.user))

    @extend_schema(responses={200: JobCostSerializer})
    @action(detail=True, methods=["get"])
    def cost(self, request, pk=None):
        """What the job cost so far: GPU-hours and GPU, CPU and memory cost of each attempt that ran and
        in total, priced with the price book (a running job up to now), and the estimated total."""
        report = job_cost_report(job=self.get_object(), now=timezone.now(), speedup=runtime_speedup())
        return Response(JobCostSerializer(report).data)

    @extend_schema(request=None, responses={200: JobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = self.get_object()
        job_cancel(job=job, by=request.user)
        return Response(self.job_one(job.pk))


class TeamViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = TeamSerializer
    lookup_field = "slug"

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Team.objects.none()
        return team_list_for_user(user=self.request.user)


class LocalQueueViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = LocalQueueSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return LocalQueue.objects.none()
        return local_queue_list(user=self.request.user)


class GpuModelViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = GpuModelSerializer
    queryset = GpuModel.objects.all()
    lookup_field = "name"
    lookup_value_regex = "[^/]+"


class PriorityClassViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = PriorityClassSerializer
    queryset = PriorityClass.objects.all()
    lookup_field = "name"


class ClusterQueueListView(APIView):
    """Cluster queues with their quotas and current usage per GPU model."""

    @extend_schema(responses={200: dict})
    def get(self, request):
        return Response({"results": cluster_queue_list()})


class CapacityWantedView(APIView):
    """The capacity signal: new nodes per pool and GPU model that would let the jobs waiting for
    capacity (not quota) start, over the jobs of the caller's teams (all teams for platform admins).
    ``nodes`` sums each job's own request (an upper bound); ``largest`` is the biggest single one."""

    @extend_schema(responses={200: dict})
    def get(self, request):
        rows = capacity_wanted(user=request.user)
        return Response(
            {
                "results": [
                    {"pool": r.pool, "gpu_model": r.gpu_model, "jobs": r.jobs, "nodes": r.nodes, "largest": r.largest}
                    for r in rows
                ]
            }
        )


class ClusterQueueDetailView(APIView):
    """One cluster queue. PATCH (platform admins only) edits its quotas; every change is recorded."""

    @extend_schema(responses={200: dict}, operation_id="v1_cluster_queues_detail")
    def get(self, request, name):
        row = next((r for r in cluster_queue_list() if r["name"] == name), None)
        if row is None:
            return Response({"detail": f"no cluster queue {name!r}"}, status=status.HTTP_404_NOT_FOUND)
        return Response(row)

    @extend_schema(request=QuotaUpdateSerializer, responses={200: dict})
    def patch(self, request, name):
        if not request.user.is_staff:
            raise PermissionDenied("only platform admins edit quotas")
        cq = ClusterQueue.objects.filter(name=name).first()
        if cq is None:
            return Response({"detail": f"no cluster queue {name!r}"}, status=status.HTTP_404_NOT_FOUND)
        serializer = QuotaUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        with transaction.atomic():
            changes = queue_quota_update(
                cluster_queue=cq,
                by=request.user,
                cpu_quota_milli=data.get("cpu_quota_milli", ...),
                memory_quota_mib=data.get("memory_quota_mib", ...),
                flavors={k: dict(v) for k, v in data.get("flavors", {}).items()},
            )
        row = next(r for r in cluster_queue_list() if r["name"] == name)
        row["changes"] = [str(c) for c in changes]
        row["warnings"] = below_use_warnings(queue_standings_now(), cluster_queue=name)
        return Response(row)


class ClusterView(APIView):
    """Every node and GPU with what holds it, per GPU model totals and FGD fragmentation (the cluster
    page's data). Filters: ``gpu_model``, ``pool``, ``rack``, ``state``. Another team's job is counted,
    never named."""

    @extend_schema(
        responses={200: dict},
        parameters=[OpenApiParameter(name, str, required=False) for name in ("gpu_model", "pool", "rack", "state")],
    )
    def get(self, request):
        filters = {k: request.query_params.get(k, "").strip()[:253] for k in ("gpu_model", "pool", "rack", "state")}
        return Response(cluster_view(user=request.user, **filters))


class FairnessView(APIView):
    """Per ClusterQueue and cohort: nominal, in use, borrowed, lent and pending demand per GPU model; each
    queue's weighted DRF share; wait P50/P90 over 24 h and 7 d; the heads of the queues and why they wait;
    quota warnings (the Queues page's data)."""

    @extend_schema(responses={200: dict})
    def get(self, request):
        return Response(queue_overview(user=request.user, now=timezone.now()))
