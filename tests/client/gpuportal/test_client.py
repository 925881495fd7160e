"""``gpuportal.Portal`` against a live portal: submit → the simulated cluster runs the job → ``wait``
returns Succeeded → ``cost`` equals price × GPU-hours recomputed from the price book's rows; errors
carry the portal's answer; the same idempotency key never makes a second job."""

from __future__ import annotations

import http.server
import io
import json
import threading
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

import pytest

from billing.models import PriceBookEntry
from gpuportal import (
    AuthenticationError,
    Conflict,
    NotFound,
    PermissionDenied,
    Portal,
    ValidationError,
    WaitTimeout,
)
from portal.jobs.models import Job as JobRow
from portal.jobs.states import JobState
from tests.client.conftest import SPEEDUP, needs_dry_run

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {
    "name": "resnet",
    "queue": "default",
    "image": "nvcr.io/nvidia/pytorch:24.08-py3",
    "command": "python train.py",
    "gpu": 2,
    "cpu_milli": 4000,
    "memory_mib": 16384,
    "runtime_s": 60,
    "allowed_gpu_models": ["A100-80GB"],
}


def price(resource: str, gpu_model: str = "") -> Fraction:
    """The on-demand price book row of a resource, exactly (the seed has one row per item)."""
    row = PriceBookEntry.objects.get(resource=resource, gpu_model=gpu_model, capacity_type="on-demand")
    return Fraction(row.usd_per_hour)


def hours_between(start: datetime, end: datetime) -> Fraction:
    return Fraction(round((end - start).total_seconds() * 1_000_000), 3_600_000_000)


def rounded(value: Fraction) -> Decimal:
    return Decimal(round(value * 10**6)).scaleb(-6)


def test_a_job_submitted_from_python_runs_to_succeeded_and_costs_price_times_gpu_hours(portal_url, key_of, cluster):
    portal = Portal(portal_url, key_of("alice"))
    job = portal.submit(SPEC)
    assert (job.name, job.team, job.queue, job.owner, job.gpu) == ("resnet", "vision", "default", "alice", 2)
    assert job.state in ("Pending", "Admitted", "Running")

    seen: list[str] = []
    bar = io.StringIO()
    done = portal.wait(job, poll_s=0.1, timeout_s=30, on_change=lambda j: seen.append(j.state), file=bar)

    assert done.state == "Succeeded"
    assert done.succeeded
    assert done.done
    assert seen[-1] == "Succeeded"
    # The job's own history: it waited, was admitted, ran and succeeded on the simulated cluster.
    path = [t.to_state for t in done.transitions]
    assert path == ["Pending", "Admitted", "Running", "Succeeded"]
    assert done.placements == () or all(p.node.startswith("a100-") for p in done.placements)
    assert f"job {job.id} resnet" in bar.getvalue()
    assert "Succeeded" in bar.getvalue()

    cost = portal.cost(done)
    running_at = next(t.at for t in done.transitions if t.to_state == "Running")
    ended_at = next(t.at for t in done.transitions if t.to_state == "Succeeded")
    assert running_at is not None
    assert ended_at is not None
    run_hours = hours_between(running_at, ended_at)
    assert run_hours > 0
    gpu_usd = 2 * run_hours * price("gpu", "A100-80GB")
    cpu_usd = 4 * run_hours * price("cpu")
    memory_usd = 16 * run_hours * price("memory")
    assert cost.job == job.id
    assert cost.currency == "USD"
    assert not cost.running
    assert cost.gpu_hours == rounded(2 * run_hours)
    assert cost.gpu_usd == rounded(gpu_usd)
    assert cost.cpu_usd == rounded(cpu_usd)
    assert cost.memory_usd == rounded(memory_usd)
    assert cost.total_usd == rounded(gpu_usd + cpu_usd + memory_usd)
    [run] = cost.runs
    assert (run.gpu_model, run.capacity_type, run.gpus) == ("A100-80GB", "on-demand", Decimal(2))
    assert Fraction(run.price_per_gpu_hour) == price("gpu", "A100-80GB")


def test_the_same_idempotency_key_twice_returns_the_first_job_and_never_a_second(portal_url, key_of):
    portal = Portal(portal_url, key_of("alice"))
    first = portal.submit(SPEC, idempotency_key="nightly-2026-11-20")
    again = portal.submit(SPEC, idempotency_key="nightly-2026-11-20")
    assert again.id == first.id
    assert JobRow.objects.count() == 1
    with pytest.raises(ValidationError) as refused:
        portal.submit({**SPEC, "gpu": 1}, idempotency_key="nightly-2026-11-20")
    assert refused.value.status == 422
    assert "Idempotency-Key" in refused.value.errors
    # Without a key of your own every call is a new job (each carries a fresh generated key).
    assert portal.submit(SPEC).id != first.id
    assert JobRow.objects.count() == 2


def test_a_spec_the_portal_refuses_raises_validation_error_naming_each_field(portal_url, key_of):
    portal = Portal(portal_url, key_of("alice"))
    with pytest.raises(ValidationError) as both:
        portal.submit({**SPEC, "gpu_milli": 250})
    assert both.value.status == 400
    assert "set only one of" in both.value.errors["gpu_milli"][0]
    assert "gpu_milli" in str(both.value)

    with pytest.raises(ValidationError) as unknown:
        portal.submit({**SPEC, "gpus": 2})
    assert unknown.value.errors == {"gpus": ["unknown field"]}

    with pytest.raises(ValidationError) as never:
        portal.submit({**SPEC, "gpu": 16})  # the largest A100 node has 8
    assert never.value.reason is not None
    assert never.value.reason.waits is False
    assert never.value.reason.details["limit"] == "largest_node"
    assert "gpu" in never.value.errors

    with pytest.raises(ValidationError) as nested:
        portal.submit({**SPEC, "tolerations": [{"key": "x", "operator": "Sometimes"}]})
    assert nested.value.errors == {"tolerations.0.operator": ['"Sometimes" is not a valid choice.']}
    assert nested.value.detail == 'invalid input: tolerations.0.operator: "Sometimes" is not a valid choice.'
    assert JobRow.objects.count() == 0


def test_errors_map_to_their_exception_classes(portal_url, key_of, world):
    alice, carol = Portal(portal_url, key_of("alice")), Portal(portal_url, key_of("carol"))
    with pytest.raises(AuthenticationError) as unknown_token:
        Portal(portal_url, "gpt_not-a-real-key").job(1)
    assert unknown_token.value.status == 401

    bobs = world.submit("nlp", name="bobs")
    with pytest.raises(NotFound):  # another team's job answers as if it did not exist
        alice.job(bobs.pk)

    job = alice.submit(SPEC)
    with pytest.raises(PermissionDenied) as denied:  # carol is in team vision but neither owner nor admin
        carol.cancel(job)
    assert denied.value.status == 403

    cancelled = alice.cancel(job)
    assert cancelled.state == "Cancelled"
    assert alice.cancel(job).state == "Cancelled"  # a repeated (or retried) cancel is not an error
    JobRow.objects.filter(pk=job.id).update(state=JobState.SUCCEEDED)
    with pytest.raises(Conflict) as finished:
        alice.cancel(job.id)
    assert finished.value.status == 409
    assert "cannot be cancelled" in finished.value.detail


def test_jobs_filters_and_pages_through_every_match(portal_url, key_of, world):
    for index in range(7):
        world.submit("vision", name=f"sweep-{index}")
    world.submit("nlp", name="not-alices")
    JobRow.objects.filter(name="sweep-6").update(state=JobState.RUNNING)
    alice = Portal(portal_url, key_of("alice"))

    every = list(alice.jobs(page_size=3))  # three pages
    assert sorted(j.name for j in every) == [f"sweep-{i}" for i in range(7)]
    assert len({j.id for j in every}) == 7
    pending = list(alice.jobs(state="Pending", team="vision", page_size=2))
    assert sorted(j.name for j in pending) == [f"sweep-{i}" for i in range(6)]
    both = list(alice.jobs(state=["Pending", "Running"], queue="default", page_size=50))
    assert len(both) == 7
    assert [j.name for j in alice.jobs(state="Running")] == ["sweep-6"]
    assert len(list(alice.jobs(limit=4, page_size=3))) == 4
    assert alice.job(every[0].id) == every[0]
    assert alice.teams() == ["vision"]


def test_wait_gives_up_after_its_timeout_with_the_job_as_last_seen(portal_url, key_of):
    portal = Portal(portal_url, key_of("alice"))
    job = portal.submit(SPEC)  # no scheduler loop: nothing moves it past admission
    with pytest.raises(WaitTimeout) as timed_out:
        portal.wait(job, timeout_s=0.3, poll_s=0.1, progress=False)
    assert timed_out.value.job.id == job.id
    assert not timed_out.value.job.done


@needs_dry_run
def test_check_answers_runs_now_with_the_cost_the_price_book_gives(portal_url, key_of):
    portal = Portal(portal_url, key_of("alice"))
    check = portal.check({**SPEC, "runtime_s": 3600})
    assert check.verdict == "runs_now"
    assert check.runs_now
    assert check.gpu_model == "A100-80GB"
    assert all(p.node.startswith("a100-") for p in check.placements)
    assert check.cost is not None
    # Priced for the requested hour in the cluster's own time (the simulated cluster runs SPEEDUP× faster):
    # 2 GPUs × 3600 s / SPEEDUP, at the A100 on-demand row of the price book.
    gpu_hours = 2 * Fraction(3600) / Fraction(SPEEDUP) / 3600
    assert check.cost.gpu_hours == rounded(gpu_hours)
    assert check.cost.gpu_usd == rounded(gpu_hours * price("gpu", "A100-80GB"))
    assert Fraction(check.cost.price_per_gpu_hour or 0) == price("gpu", "A100-80GB")
    assert JobRow.objects.count() == 0  # nothing was submitted


@needs_dry_run
def test_check_says_never_for_more_gpus_than_any_node_has_naming_the_limit(portal_url, key_of):
    portal = Portal(portal_url, key_of("alice"))
    check = portal.check({**SPEC, "gpu": 16})  # the largest A100 node has 8
    assert check.verdict == "never"
    assert check.never
    assert check.reason is not None
    assert check.reason.waits is False
    assert "8" in check.reason.message
    assert JobRow.objects.count() == 0


@needs_dry_run
def test_check_refuses_a_bad_spec_like_submit_does(portal_url, key_of):
    with pytest.raises(ValidationError) as refused:
        Portal(portal_url, key_of("alice")).check({**SPEC, "gpu_milli": 250})
    assert "gpu_milli" in refused.value.errors


NEVER_FITS_400 = {
    "detail": "gpu: placement: never fits as configured: one replica needs 16 A100-80GB GPUs and the largest "
    "A100-80GB node has 8",
    "errors": {"gpu": ["placement: never fits as configured: ..."]},
    "reason": {"kind": "placement", "waits": False, "message": "one replica needs 16 A100-80GB GPUs and the largest "
               "A100-80GB node has 8", "details": {"limit": "largest_node"}},
}  # fmt: skip


@pytest.fixture
def answering():
    """A server in the test answering every POST with a given status and JSON body (what the portal
    answers a submission that never fits as configured, before a dry-run endpoint says it)."""
    replies: list[tuple[int, dict]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            status, body = replies.pop(0)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", replies
    server.shutdown()


@pytest.mark.django_db(transaction=False)
def test_a_spec_refused_because_it_never_fits_is_checks_never_answer_and_others_still_raise(answering):
    url, replies = answering
    portal = Portal(url, "gpt_test")
    replies.append((400, NEVER_FITS_400))
    check = portal.check({**SPEC, "gpu": 16})
    assert check.never
    assert check.reason is not None
    assert check.reason.details == {"limit": "largest_node"}
    replies.append((400, {"detail": "invalid input: gpu_milli: ...", "errors": {"gpu_milli": ["..."]}}))
    with pytest.raises(ValidationError):
        portal.check({**SPEC, "gpu_milli": 250})


def test_a_training_spec_round_trips_and_capacity_reports_the_waiting_gang(portal_url, key_of, world, settings):
    from django.utils import timezone

    from scheduling.adapters.simulated import SimulatedCluster
    from scheduling.services import cycle_run

    portal = Portal(portal_url, key_of("alice"))
    # Two A100 nodes of 8 GPUs in the test world: a 3 x 8 gang needs three, so it waits for capacity.
    spec = {**SPEC, "kind": "training", "replicas": 3, "gpu": 8, "max_restarts": 2, "checkpoint_path": "s3://c/r"}
    settings.QUEUE_NEVER_FITTING_JOBS = True  # today's nodes cannot hold it; new ones could
    world.cluster_queues["vision"].flavors.filter(gpu_model=world.models["A100-80GB"]).update(nominal_gpus=64)
    job = portal.submit({**spec, "spot": True})
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    job = portal.job(job)
    assert (job.kind, job.replicas, job.max_restarts, job.checkpoint_path, job.spot) == (
        "training",
        3,
        2,
        "s3://c/r",
        True,
    )
    assert job.state == "Pending"
    assert portal.capacity() == [{"pool": "", "gpu_model": "A100-80GB", "jobs": 1, "nodes": 3, "largest": 3}]
