"""``portal.api.job_rows`` renders the API's job shape from plain rows; ``JobSerializer`` (model
instances, DRF's nested serializers) is the reference. For any mix of jobs — spec fields, pending,
admitted, running, finished, cancelled, requeued after a preemption, on several attempts — both give
the same answer, key for key and in the same order."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.selectors import job_costs
from portal.api.job_rows import job_page_rows, jobs_render
from portal.api.serializers import JobSerializer
from portal.jobs.models import Job
from portal.jobs.services import job_cancel
from portal.tenants.models import TolerationGrant
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db

_JOB = st.fixed_dictionaries(
    {
        "team": st.sampled_from(["vision", "nlp"]),
        "priority": st.sampled_from(["low", "default", "critical"]),
        "shape": st.sampled_from([{"gpu": 1}, {"gpu": 4}, {"gpu_milli": 500}, {}]),
        "replicas": st.integers(1, 2),
        "allowed": st.sampled_from([(), ("A100-80GB",), ("A100-80GB", "T4")]),
        "runtime_s": st.integers(60, 20_000),
        "restart_policy": st.sampled_from(["requeue", "never"]),
        "labels": st.dictionaries(st.sampled_from(["project", "cc"]), st.sampled_from(["atlas", "42"]), max_size=2),
        "tolerations": st.lists(st.just({"key": "spot", "operator": "Exists"}), max_size=1),
        "command": st.lists(st.sampled_from(["python", "train.py", "--x"]), max_size=3),
        "name": st.sampled_from(["", "resnet"]),
        "spot": st.booleans(),
        "window": st.sampled_from([{}, {"off_peak": True}, {"start_window": "22:00-06:00"}]),
    }
)
_STEP = st.one_of(
    st.tuples(st.just("cycle"), st.integers(1, 4000)),  # seconds on: jobs start, run and finish meanwhile
    st.tuples(st.just("cancel"), st.integers(0, 10)),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(_JOB, min_size=1, max_size=5), steps=st.lists(_STEP, max_size=5))
def test_the_row_renderer_agrees_with_the_job_serializer(world, jobs, steps):
    for team in world.teams.values():
        TolerationGrant.objects.get_or_create(team=team, all_taints=True)
    for job in jobs:
        shape = job["shape"]
        world.submit(
            team=job["team"],
            name=job["name"],
            command=tuple(job["command"]),
            priority_class=world.priorities[job["priority"]],
            replicas=job["replicas"],
            allowed_gpu_models=tuple(world.models[name] for name in job["allowed"]),
            runtime_s=job["runtime_s"],
            restart_policy=job["restart_policy"],
            spot=job["spot"],
            **job["window"],
            labels=tuple(sorted(job["labels"].items())),
            tolerations=tuple(job["tolerations"]),
            gpu=shape.get("gpu", 0),
            gpu_milli=shape.get("gpu_milli", 0),
            mig_profile=shape.get("mig_profile", ""),
        )
    backend = SimulatedCluster()
    now = timezone.now()
    for action, value in steps:
        if action == "cycle":
            now += timedelta(seconds=value)
            cycle_run(now=now, backend=backend)
        else:
            ids = list(Job.objects.order_by("id").values_list("id", flat=True))
            job = Job.objects.get(pk=ids[value % len(ids)])
            if job.state in ("Pending", "Admitted", "Running"):
                job_cancel(job=job, by=world.users["admin"], at=now)
    now += timedelta(seconds=30)
    speedup = 60.0
    instances = list(
        Job.objects.select_related("team", "local_queue", "priority_class", "gpu_model", "owner")
        .prefetch_related("allowed_gpu_models", "placements", "transitions", "attempts")
        .order_by("-created_at", "-id")
    )
    costs = job_costs(jobs=instances, now=now, speedup=speedup)
    expected = JobSerializer(instances, many=True, context={"costs": costs}).data
    rendered = jobs_render(list(job_page_rows(Job.objects.order_by("-created_at", "-id"))), now=now, speedup=speedup)
    assert [list(job) for job in rendered] == [list(job) for job in expected]  # the same keys, in order
    for got, want in zip(rendered, expected, strict=True):
        assert [list(a) for a in got["attempts"]] == [list(a) for a in want["attempts"]]
        assert got == want


def test_a_page_of_jobs_never_admitted_reads_no_attempts_and_no_placements(world):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def tables_read() -> tuple[set[str], list[dict]]:
        rows = list(job_page_rows(Job.objects.order_by("-created_at", "-id")))
        with CaptureQueriesContext(connection) as captured:
            rendered = jobs_render(rows, now=timezone.now(), speedup=60.0)
        read = {t for t in ("jobs_jobattempt", "jobs_replicaplacement") if any(t in q["sql"] for q in captured)}
        return read, rendered

    world.submit(gpu=1)
    world.submit(gpu=2)
    read, rendered = tables_read()
    assert read == set()
    assert [(job["attempts"], job["placements"]) for job in rendered] == [([], []), ([], [])]
    cycle_run(now=timezone.now(), backend=SimulatedCluster())  # both admitted: attempt 1, placements
    read, rendered = tables_read()
    assert read == {"jobs_jobattempt", "jobs_replicaplacement"}
    assert [len(job["attempts"]) for job in rendered] == [1, 1]
    assert [sum(len(p["gpu_indices"]) for p in job["placements"]) for job in rendered] == [2, 1]


def test_the_relations_rows_are_the_orms_rows(world):
    from portal.api.job_rows import _ROWS, _allowed_read
    from portal.jobs.models import JobTransition, ReplicaPlacement

    a = world.submit(gpu=2, allowed_gpu_models=(world.models["T4"], world.models["A100-80GB"]))
    b = world.submit(gpu=1)
    world.submit(gpu=1)  # not asked for
    cycle_run(now=timezone.now(), backend=SimulatedCluster())  # admitted: placements, transitions with details
    job_cancel(job=b, by=world.users["admin"], at=timezone.now())
    ids = [b.pk, a.pk]
    for model, order in ((JobTransition, ("at", "id")), (ReplicaPlacement, ("job", "replica"))):
        expected = list(model.objects.filter(job_id__in=ids).order_by(*order).values())
        assert expected  # something to compare
        assert _ROWS[model].read(ids) == expected
    assert any(t["detail"] for t in _ROWS[JobTransition].read(ids))  # JSON decoded, not text
    assert dict(_allowed_read(ids)) == {a.pk: ["A100-80GB", "T4"]}


def test_the_prepared_job_rows_are_the_orms_rows_for_any_teams_order_and_page(world):
    from billing.selectors import job_ordering
    from portal.api.job_rows import JobRows

    for team in ("vision", "nlp", "vision", "nlp", "vision"):
        world.submit(team, gpu=1, allowed_gpu_models=(world.models["T4"], world.models["A100-80GB"]))
    world.submit("nlp", owner="carol", gpu=2)
    cycle_run(now=timezone.now(), backend=SimulatedCluster())  # some admitted: states, models, times differ
    job_cancel(job=Job.objects.order_by("id").last(), by=world.users["admin"], at=timezone.now())
    vision, nlp = world.teams["vision"].pk, world.teams["nlp"].pk
    for team_ids, count in ((None, 6), ([vision], 3), ([nlp, vision], 6), ([], 0)):
        jobs = Job.objects.all() if team_ids is None else Job.objects.filter(team_id__in=team_ids)
        for sort in ("", "submitted", "-owner", "owner", "state", "-state"):
            _, ordering = job_ordering(sort)
            expected = list(job_page_rows(jobs.order_by(*ordering)))
            rows = JobRows(team_ids=team_ids, ordering=ordering)
            assert rows.count() == len(expected) == count
            assert rows[0:50] == expected
            assert rows[1:3] == expected[1:3]
            assert rows[4:6] == expected[4:6]
        for job in Job.objects.all():
            one = JobRows(team_ids=team_ids, ordering=()).one(job.pk)
            if team_ids is None or job.team_id in team_ids:
                assert one == next(iter(job_page_rows(Job.objects.filter(pk=job.pk))))
            else:
                assert one is None  # another team's job is not read
    assert JobRows(team_ids=None, ordering=()).one(-1) is None


def test_a_running_inference_replica_is_rendered_as_the_serializer_renders_it(world):
    """Its cost estimate runs until stopped (priced over the next hour, no expected end): the row
    renderer reads the job's kind as the serializer does."""
    world.submit(gpu=1, kind="inference", runtime_s=3600)
    start = timezone.now()
    cycle_run(now=start, backend=SimulatedCluster())
    cycle_run(now=start + timedelta(seconds=30), backend=SimulatedCluster())
    now = start + timedelta(minutes=10)
    instances = list(
        Job.objects.select_related("team", "local_queue", "priority_class", "gpu_model", "owner").prefetch_related(
            "allowed_gpu_models", "placements", "transitions", "attempts"
        )
    )
    assert [(job.kind, job.state) for job in instances] == [("inference", "Running")]
    costs = job_costs(jobs=instances, now=now, speedup=60.0)
    expected = JobSerializer(instances, many=True, context={"costs": costs}).data
    assert jobs_render(list(job_page_rows(Job.objects.all())), now=now, speedup=60.0) == expected
