"""Schedules fire each instant once, whoever fires them, and submit the job as a submission would."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from portal.api.job_create import job_spec_from_body
from portal.jobs.errors import ServiceError
from portal.jobs.models import Job
from portal.schedules.models import JobSchedule, ScheduledRun
from portal.schedules.services import schedule_create, schedule_enable, schedules_fire

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)  # a Monday
BODY = {"queue": "default", "team": "vision", "image": "nvcr.io/nvidia/pytorch:24.08-py3", "gpu": 1}


def make(world, *, cron="0 * * * *", zone="UTC", body=None, **kwargs) -> JobSchedule:
    return schedule_create(
        owner=world.users["alice"],
        name=kwargs.pop("name", "nightly"),
        cron=cron,
        zone=zone,
        job=body or BODY,
        spec_of=job_spec_from_body,
        now=T0,
        **kwargs,
    )


@pytest.mark.django_db
def test_it_submits_the_job_at_each_instant_and_only_then(world):
    schedule = make(world)
    assert schedule.next_run_at == T0 + timedelta(hours=1)
    assert schedules_fire(spec_of=job_spec_from_body, now=T0 + timedelta(minutes=59)) == []
    runs = schedules_fire(spec_of=job_spec_from_body, now=T0 + timedelta(hours=1, seconds=5))
    assert [r.run_at for r in runs] == [T0 + timedelta(hours=1)]
    job = Job.objects.get()
    assert (job.team.slug, job.gpu, job.name, job.labels["schedule"]) == ("vision", 1, "nightly", str(schedule.pk))
    assert job.transitions.get().actor == "alice"


@pytest.mark.django_db
def test_firing_again_at_the_same_time_starts_nothing(world):
    make(world)
    now = T0 + timedelta(hours=1, seconds=5)
    schedules_fire(spec_of=job_spec_from_body, now=now)
    schedules_fire(spec_of=job_spec_from_body, now=now)
    schedules_fire(spec_of=job_spec_from_body, now=now + timedelta(seconds=20))
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_a_beat_that_lost_its_cursor_does_not_start_a_run_twice(world):
    # A restarted beat (or a restored database) that fires an instant already run: the unique
    # (schedule, run_at) key refuses the second run.
    schedule = make(world)
    now = T0 + timedelta(hours=1, seconds=5)
    schedules_fire(spec_of=job_spec_from_body, now=now)
    JobSchedule.objects.filter(pk=schedule.pk).update(fired_through=T0, next_run_at=T0)
    assert schedules_fire(spec_of=job_spec_from_body, now=now) == []
    assert Job.objects.count() == 1
    assert ScheduledRun.objects.count() == 1


@pytest.mark.django_db
def test_after_downtime_only_the_newest_instant_runs_and_the_others_are_missed(world):
    schedule = make(world)
    runs = schedules_fire(spec_of=job_spec_from_body, now=T0 + timedelta(hours=5, minutes=1))
    assert [r.run_at for r in runs] == [T0 + timedelta(hours=5)]
    schedule.refresh_from_db()
    assert schedule.missed_runs == 4
    assert schedule.next_run_at == T0 + timedelta(hours=6)


@pytest.mark.django_db
def test_an_instant_older_than_the_starting_deadline_is_missed_not_run(world, settings):
    settings.SCHEDULE_STARTING_DEADLINE_S = 60
    schedule = make(world)
    assert schedules_fire(spec_of=job_spec_from_body, now=T0 + timedelta(hours=1, minutes=5)) == []
    schedule.refresh_from_db()
    assert (schedule.missed_runs, Job.objects.count()) == (1, 0)


@pytest.mark.django_db
def test_the_forbid_policy_skips_a_run_while_the_previous_job_is_unfinished(world):
    make(world, concurrency_policy=JobSchedule.ConcurrencyPolicy.FORBID)
    schedules_fire(spec_of=job_spec_from_body, now=T0 + timedelta(hours=1))
    [second] = schedules_fire(spec_of=job_spec_from_body, now=T0 + timedelta(hours=2))
    assert second.outcome == ScheduledRun.Outcome.SKIPPED
    assert "has not finished" in second.message
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_a_run_whose_job_is_refused_records_why(world):
    schedule = make(world)
    world.queues["vision"].max_pending_jobs = 0
    world.queues["vision"].save()
    [run] = schedules_fire(spec_of=job_spec_from_body, now=T0 + timedelta(hours=1))
    assert run.outcome == ScheduledRun.Outcome.REFUSED
    assert run.message.startswith("queue:")
    assert schedule.runs.count() == 1
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_the_cron_is_read_in_the_schedules_zone(world):
    make(world, cron="0 20 * * *", zone="America/New_York")
    schedule = JobSchedule.objects.get()
    # 20:00 in New York in January is 01:00 UTC the next day.
    assert schedule.next_run_at == datetime(2026, 1, 6, 1, 0, tzinfo=UTC)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cron": "0 0 31 2 *"}, "cron"),  # February 31st never comes
        ({"cron": "every night"}, "cron"),
        ({"zone": "Europe/Atlantis"}, "timezone"),
        ({"body": {**BODY, "gpu": -1}}, "job.gpu"),
        ({"body": {**BODY, "queue": "nope"}}, "job.queue"),
        ({"body": {**BODY, "replicas": 2, "min_available": 3}}, "job.min_available"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_field(world, kwargs, field):
    with pytest.raises(ServiceError) as exc:
        make(world, **kwargs)
    assert exc.value.field == field


@pytest.mark.django_db
def test_a_paused_schedule_fires_nothing_and_resuming_skips_the_paused_time(world):
    schedule = make(world)
    schedule_enable(schedule=schedule, by=world.users["alice"], enabled=False)
    assert schedules_fire(spec_of=job_spec_from_body, now=T0 + timedelta(hours=3)) == []
    schedule = schedule_enable(schedule=schedule, by=world.users["alice"], enabled=True, now=T0 + timedelta(hours=3))
    assert schedule.next_run_at == T0 + timedelta(hours=4)
    assert schedule.missed_runs == 0


@pytest.mark.django_db
def test_only_the_owner_or_a_team_admin_may_pause_it(world):
    schedule = make(world)
    with pytest.raises(ServiceError) as exc:
        schedule_enable(schedule=schedule, by=world.users["carol"], enabled=False)
    assert exc.value.status_code == 403


@pytest.mark.django_db(transaction=True)
def test_two_beats_firing_at_once_start_one_job():
    from tests.factories import build_world

    world = build_world()
    make(world)
    now = T0 + timedelta(hours=1, seconds=1)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def beat() -> None:
        try:
            barrier.wait()
            schedules_fire(spec_of=job_spec_from_body, now=now)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=beat) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Job.objects.count() == 1
    assert ScheduledRun.objects.count() == 1
