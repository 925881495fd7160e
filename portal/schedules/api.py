"""REST API for job schedules: ``/api/v1/schedules/``.

A schedule is a cron expression in a time zone and the body of a job submission; every instant it
submits that job once. The job body is checked as a submission is (a 400 names ``job.<field>``).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.api.job_create import StrictSerializer, job_spec_from_body
from portal.schedules.cron import MAX_CRON_CHARS
from portal.schedules.models import JobSchedule, ScheduledRun
from portal.schedules.selectors import schedule_list, schedule_runs
from portal.schedules.services import schedule_create, schedule_delete, schedule_enable


class ScheduledRunSerializer(serializers.ModelSerializer):
    job = serializers.IntegerField(source="job_id", allow_null=True)
    job_state = serializers.CharField(source="job.state", default=None)

    class Meta:
        model = ScheduledRun
        fields = ["run_at", "fired_at", "outcome", "message", "job", "job_state"]
        read_only_fields = fields


class ScheduleSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug")
    queue = serializers.CharField(source="local_queue.name")
    owner = serializers.CharField(source="owner.username")
    recent_runs = serializers.SerializerMethodField()

    class Meta:
        model = JobSchedule
        fields = [
            "id", "name", "team", "queue", "owner", "cron", "timezone", "job", "concurrency_policy",
            "enabled", "created_at", "next_run_at", "missed_runs", "recent_runs",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(ScheduledRunSerializer(many=True))
    def get_recent_runs(self, schedule: JobSchedule) -> list[dict]:
        runs = ScheduledRunSerializer(schedule_runs(schedule=schedule, limit=10), many=True)
        return list(runs.data)


class ScheduleCreateSerializer(StrictSerializer):
    name = serializers.RegexField(r"^[a-z0-9]([-a-z0-9]{0,98}[a-z0-9])?$", max_length=100)
    cron = serializers.CharField(max_length=MAX_CRON_CHARS, help_text="e.g. '0 2 * * *' (02:00 every day)")
    timezone = serializers.CharField(max_length=64, default="UTC", help_text="IANA zone, e.g. Europe/Berlin")
    concurrency_policy = serializers.ChoiceField(
        choices=JobSchedule.ConcurrencyPolicy.choices, default=JobSchedule.ConcurrencyPolicy.ALLOW
    )
    enabled = serializers.BooleanField(default=True)
    job = serializers.DictField(help_text="The job request: the body of POST /api/v1/jobs/.")


class ScheduleUpdateSerializer(StrictSerializer):
    enabled = serializers.BooleanField()


class ScheduleViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Job schedules of your teams (another team's answers 404). PATCH pauses or resumes one."""

    serializer_class = ScheduleSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return JobSchedule.objects.none()
        return schedule_list(user=self.request.user)

    @extend_schema(request=ScheduleCreateSerializer, responses={201: ScheduleSerializer})
    def create(self, request, *args, **kwargs):
        serializer = ScheduleCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        schedule = schedule_create(
            owner=request.user,
            name=data["name"],
            cron=data["cron"],
            zone=data["timezone"],
            job=data["job"],
            spec_of=job_spec_from_body,
            concurrency_policy=data["concurrency_policy"],
            enabled=data["enabled"],
        )
        return Response(ScheduleSerializer(schedule).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ScheduleUpdateSerializer, responses={200: ScheduleSerializer})
    def partial_update(self, request, *args, **kwargs):
        serializer = ScheduleUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        schedule = schedule_enable(
            schedule=self.get_object(), by=request.user, enabled=serializer.validated_data["enabled"]
        )
        return Response(ScheduleSerializer(schedule).data)

    def destroy(self, request, *args, **kwargs):
        schedule_delete(schedule=self.get_object(), by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses={200: ScheduledRunSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def runs(self, request, pk=None):
        """The schedule's latest 50 runs, newest first: the instant, the outcome and the job it submitted."""
        return Response(ScheduledRunSerializer(schedule_runs(schedule=self.get_object()), many=True).data)
