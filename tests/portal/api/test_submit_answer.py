"""The submit answer renders the job from what the submission wrote (``submitted_rows``), not by
reading it back: for any request shape it must equal what reading it back answers (``GET`` of the
job, the path the answer took before), key for key."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.services import price_book_seed_defaults
from portal.jobs.models import Job
from portal.tenants.models import TolerationGrant
from scheduling.dry_run import dry_run_forget
from scheduling.selectors import job_never_fits

pytestmark = pytest.mark.django_db

_BODY = st.fixed_dictionaries(
    {"image": st.sampled_from(["nvcr.io/nvidia/pytorch:24.08-py3", "  busybox  "])},
    optional={
        "name": st.sampled_from(["", "resnet", "ünïcode"]),
        "kind": st.sampled_from(["batch", "training"]),
        "gpu": st.integers(0, 2),
        "replicas": st.integers(1, 2),
        "cpu_milli": st.integers(1, 4000),
        "runtime_s": st.integers(60, 20_000),
        "priority_class": st.sampled_from(["low", "default", "critical"]),
        "allowed_gpu_models": st.sampled_from([[], ["T4"], ["T4", "A100-80GB"], ["A100-80GB", "T4"]]),
        "command": st.sampled_from(["python train.py --lr 0.1", ["sh", "-c", "echo hi"], []]),
        "labels": st.dictionaries(st.sampled_from(["zeta", "project", "a", "cost-center"]), st.just("x"), max_size=3),
        "node_selector": st.sampled_from([{}, {"karpenter.sh/capacity-type": "on-demand"}]),
        "tolerations": st.sampled_from([[], [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]]),
        "start_after": st.sampled_from(["2031-05-01T10:00:00.123456+02:00", "2031-05-01T08:00:00Z", None]),
        "start_window": st.sampled_from(["", "22:00-06:00"]),
        "window_timezone": st.sampled_from(["UTC", "Europe/Berlin"]),
        "spot": st.booleans(),
        "checkpoint_path": st.sampled_from(["", "s3://bucket/ckpt"]),
        "restart_policy": st.sampled_from(["requeue", "never"]),
    },
)


@pytest.fixture(autouse=True)
def simulated(settings):
    settings.CLUSTER_BACKEND = "simulated"
    price_book_seed_defaults()
    dry_run_forget()
    yield
    dry_run_forget()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_BODY, user=st.sampled_from(["alice", "carol"]))
def test_the_submit_answer_is_the_job_as_read_back(api, world, body, user):
    TolerationGrant.objects.get_or_create(team=world.teams["vision"], all_taints=True)
    client = api(user)
    submitted = client.post("/api/v1/jobs/", {**body, "queue": "vision/default"}, format="json")
    assert submitted.status_code == 201, submitted.json()
    answer = json.loads(submitted.content)
    answer.pop("check")
    read_back = client.get(f"/api/v1/jobs/{answer['id']}/")
    assert read_back.status_code == 200
    assert answer == json.loads(read_back.content)
    assert list(answer) == list(json.loads(read_back.content))  # the same keys in the same order


def test_the_submit_answer_reads_no_row_of_the_job_back(api, world):
    client = api("alice")
    client.post("/api/v1/jobs/", {"queue": "default", "image": "busybox", "gpu": 1}, format="json")  # warm
    with CaptureQueriesContext(connection) as captured:
        submitted = client.post("/api/v1/jobs/", {"queue": "default", "image": "busybox", "gpu": 1}, format="json")
    assert submitted.status_code == 201
    reads = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("SELECT")]
    for table in ("jobs_replicaplacement", "jobs_jobtransition", "jobs_job_allowed_gpu_models"):
        assert not any(f'FROM "{table}"' in sql for sql in reads), table
    # The price book is read once, for the check's estimated cost: the new job has no attempt to price.
    assert sum('FROM "billing_pricebookentry"' in sql for sql in reads) == 1


@pytest.mark.parametrize(
    "shape",
    [
        {"gpu": 1},
        {"gpu": 9},  # more than any node has
        {"gpu": 8, "allowed": ("T4",)},  # T4 nodes have 4
        {"gpu": 2, "allowed": ("T4", "A100-80GB")},
        {"gpu": 0, "gpu_milli": 500, "allowed": ("A100-80GB",)},
        {"gpu": 1, "memory_mib": 4 * 1024 * 1024},  # more memory than any node
    ],
)
def test_the_never_fits_test_answers_the_same_with_the_models_given_as_read_back(world, settings, shape):
    settings.QUEUE_NEVER_FITTING_JOBS = True  # the job is saved whatever the verdict
    shape = dict(shape)
    models = shape.pop("allowed", ())
    job = world.submit(allowed_gpu_models=tuple(world.models[name] for name in models), **shape)
    read_back = job_never_fits(job=Job.objects.get(pk=job.pk))
    assert job_never_fits(job=job, allowed_gpu_models=tuple(models)) == read_back
    expected_never = shape.get("gpu", 0) > 8 or (models == ("T4",) and shape["gpu"] > 4) or "memory_mib" in shape
    assert (read_back is not None) == expected_never
