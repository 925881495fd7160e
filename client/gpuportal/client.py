"""``Portal``: the GPU job portal's REST API from Python (a notebook, a script, a CI job)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

import requests

from gpuportal.config import resolve
from gpuportal.errors import Conflict, PortalError, ValidationError, WaitTimeout
from gpuportal.http import Transport
from gpuportal.progress import WaitProgress
from gpuportal.types import Check, InferenceService, Job, JobCost, JobSpec, Schedule, ScheduledRun, ServiceSample

JobRef = Job | int | str
Spec = JobSpec | Mapping[str, Any]


def job_id(job: JobRef) -> int:
    """The id of a ``Job``, an int or a numeric string (``"42"``, ``"#42"``)."""
    if isinstance(job, Job):
        return job.id
    if isinstance(job, bool):
        raise TypeError("a job is a Job, an id or a numeric string")
    try:
        value = int(str(job).lstrip("#"))
    except ValueError:
        raise ValueError(f"not a job id: {job!r}") from None
    if value < 1:
        raise ValueError(f"not a job id: {job!r}")
    return value


def new_idempotency_key() -> str:
    return f"gpuportal-{uuid.uuid4().hex}"


class Portal:
    """A connection to one portal with one API token.

    ``url`` and ``token`` default to ``GPUPORTAL_URL`` / ``GPUPORTAL_TOKEN``, then to the config file
    (``gpuportal.config``). Requests that the portal throttles (429) or cannot serve for a moment
    (503) are retried after its ``Retry-After``, at most ``max_retries`` times and only when the wait
    is at most ``max_retry_wait_s``; see ``gpuportal.http`` for the whole policy. Errors are
    ``gpuportal.errors.PortalError`` subclasses.

    >>> portal = Portal("https://gpu.example.com", "gpt_…")      # doctest: +SKIP
    >>> job = portal.submit({"queue": "default", "image": "pytorch:2.4", "gpu": 1})  # doctest: +SKIP
    >>> portal.wait(job).state                                     # doctest: +SKIP
    'Succeeded'
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        config: str | Path | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 5,
        max_retry_wait_s: float = 60.0,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        settings = resolve(url, token, config=config)
        self.url = settings.url
        self.sleep = sleep
        self.http = Transport(
            settings.url,
            settings.token,
            timeout_s=timeout_s,
            max_retries=max_retries,
            max_retry_wait_s=max_retry_wait_s,
            session=session,
            sleep=sleep,
        )

    def __repr__(self) -> str:
        return f"Portal({self.url!r})"

    def __enter__(self) -> Portal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def teams(self) -> list[str]:
        """The slugs of the teams you belong to (a spec's ``team`` when you belong to several)."""
        body = self.http.get("teams/", page_size=500)
        results = body.get("results", []) if isinstance(body, Mapping) else body or []
        return [str(team.get("slug")) for team in results if isinstance(team, Mapping)]

    # -- before submitting ------------------------------------------------------------------------

    def check(self, spec: Spec) -> Check:
        """Dry run: will this spec run now, wait (where in the queue, until when, why) or never fit,
        and what would it cost. Nothing is submitted.

        A spec that can never run as configured is a ``never`` answer with the scheduler's reason, also
        when the portal refuses it outright (a 400 carrying that reason); any other refused spec raises
        ``ValidationError``."""
        try:
            body, _ = self.http.request("POST", "jobs/check/", json=dict(spec), retry_unsafe=True)
        except ValidationError as exc:
            if exc.reason is None or exc.reason.waits is not False or not isinstance(exc.body, Mapping):
                raise
            return Check.from_api({**exc.body, "verdict": "never"})
        return Check.from_api(body)

    # -- jobs ---------------------------------------------------------------------------------------

    def submit(self, spec: Spec, *, idempotency_key: str | None = None) -> Job:
        """Submit a job and return it as the portal stored it.

        Every submission carries an ``Idempotency-Key`` (a new random one unless you pass your own), so
        the client may retry it after a lost answer and the portal returns the first job, never a second
        one. Pass your own key to make a retry of the *whole call* safe too (e.g. a notebook cell run
        twice, a CI job restarted): the same key and body within 24 hours return the same job.
        """
        key = idempotency_key or new_idempotency_key()
        body, _ = self.http.request(
            "POST", "jobs/", json=dict(spec), headers={"Idempotency-Key": key}, retry_unsafe=True
        )
        return Job.from_api(body)

    def job(self, job: JobRef) -> Job:
        """The job as it is now (``NotFound`` for another team's job or a wrong id)."""
        return Job.from_api(self.http.get(f"jobs/{job_id(job)}/"))

    def jobs(
        self,
        *,
        state: str | Iterable[str] | None = None,
        team: str | None = None,
        queue: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
        page_size: int = 100,
    ) -> Iterator[Job]:
        """Jobs of your teams, newest first, filtered; pages are fetched as the iterator advances.

        ``state`` is one state or several (``["Pending", "Running"]``); ``limit`` stops after that many.
        """
        states = [state] if isinstance(state, str) else list(state or [])
        params: dict[str, Any] = {"team": team, "queue": queue, "kind": kind, "page_size": page_size}
        params = {k: v for k, v in params.items() if v is not None}
        if states:
            params["state"] = states
        page, seen = 1, 0
        while True:
            body = self.http.get("jobs/", **params, page=page)
            results = body.get("results", []) if isinstance(body, Mapping) else body or []
            for item in results:
                if limit is not None and seen >= limit:
                    return
                seen += 1
                yield Job.from_api(item)
            next_url = body.get("next") if isinstance(body, Mapping) else None
            if not next_url or not results:
                return
            # Follow the page number, not the absolute link: behind a proxy it may name another host.
            page = int(parse_qs(urlsplit(next_url).query).get("page", [page + 1])[0])

    def cancel(self, job: JobRef) -> Job:
        """Cancel a job that has not finished. Cancelling a Cancelled job returns it (so a retried
        cancel whose first answer was lost succeeds); ``Conflict`` if it Succeeded or Failed,
        ``PermissionDenied`` unless you own it or administer its team."""
        ident = job_id(job)
        try:
            body, _ = self.http.request("POST", f"jobs/{ident}/cancel/", retry_unsafe=True)
        except Conflict:
            current = self.job(ident)
            if current.state == "Cancelled":
                return current
            raise
        return Job.from_api(body)

    # -- schedules --------------------------------------------------------------------------------

    def schedule(
        self,
        name: str,
        spec: Spec,
        *,
        cron: str,
        timezone: str = "UTC",
        concurrency_policy: str = "allow",
        enabled: bool = True,
    ) -> Schedule:
        """Submit ``spec`` at every instant of ``cron`` (five fields) read in ``timezone``; each
        instant starts one job, however many beats run. ``ValidationError`` names a bad field
        (``cron``, ``timezone``, ``job.<field>``)."""
        body = {
            "name": name,
            "cron": cron,
            "timezone": timezone,
            "concurrency_policy": concurrency_policy,
            "enabled": enabled,
            "job": dict(spec),
        }
        answer, _ = self.http.request("POST", "schedules/", json=body)
        return Schedule.from_api(answer)

    def schedules(self) -> list[Schedule]:
        """Schedules of your teams."""
        body = self.http.get("schedules/", page_size=500)
        results = body.get("results", []) if isinstance(body, Mapping) else body or []
        return [Schedule.from_api(item) for item in results]

    def schedule_runs(self, schedule: Schedule | int) -> list[ScheduledRun]:
        """The schedule's latest runs, newest first."""
        ident = schedule.id if isinstance(schedule, Schedule) else int(schedule)
        return list(ScheduledRun.many(self.http.get(f"schedules/{ident}/runs/")))

    def pause_schedule(self, schedule: Schedule | int, *, paused: bool = True) -> Schedule:
        """Pause (or, with ``paused=False``, resume) a schedule; resuming fires nothing for the pause."""
        ident = schedule.id if isinstance(schedule, Schedule) else int(schedule)
        answer, _ = self.http.request("PATCH", f"schedules/{ident}/", json={"enabled": not paused}, retry_unsafe=True)
        return Schedule.from_api(answer)

    def delete_schedule(self, schedule: Schedule | int) -> None:
        """Delete a schedule (the jobs it submitted stay)."""
        ident = schedule.id if isinstance(schedule, Schedule) else int(schedule)
        self.http.request("DELETE", f"schedules/{ident}/")

    # -- inference services -------------------------------------------------------------------------

    def create_service(self, spec: Mapping[str, Any]) -> InferenceService:
        """Start an inference service (``POST /api/v1/services/``): ``name``, ``queue``, ``image``,
        ``model_size_b`` (7, 13, 70 ...) or ``gpu_memory_gib``, ``min_replicas``/``max_replicas``,
        ``metric`` (``concurrency`` or ``rps``) and ``target_per_replica``; ``ValidationError`` names a
        bad field (``min_replicas`` above ``max_replicas``, a model no GPU can hold)."""
        body, _ = self.http.request("POST", "services/", json=dict(spec))
        return InferenceService.from_api(body)

    def services(self) -> list[InferenceService]:
        """Inference services of your teams, with their replica-hours and cost so far."""
        body = self.http.get("services/", page_size=500)
        results = body.get("results", []) if isinstance(body, Mapping) else body or []
        return [InferenceService.from_api(item) for item in results]

    def service(self, service: InferenceService | int) -> InferenceService:
        ident = service.id if isinstance(service, InferenceService) else int(service)
        return InferenceService.from_api(self.http.get(f"services/{ident}/"))

    def service_samples(self, service: InferenceService | int) -> list[ServiceSample]:
        """The autoscaler's history, oldest first: load, replicas running and desired."""
        ident = service.id if isinstance(service, InferenceService) else int(service)
        return list(ServiceSample.many(self.http.get(f"services/{ident}/samples/")))

    def stop_service(self, service: InferenceService | int) -> InferenceService:
        """Stop a service: its replicas are cancelled and their quota released at once."""
        ident = service.id if isinstance(service, InferenceService) else int(service)
        body, _ = self.http.request("POST", f"services/{ident}/stop/", retry_unsafe=True)
        return InferenceService.from_api(body)

    def cost(self, job: JobRef) -> JobCost:
        """What the job cost so far: GPU-hours and GPU, CPU and memory cost of each run and in total,
        priced with the portal's price book (a running job up to now)."""
        return JobCost.from_api(self.http.get(f"jobs/{job_id(job)}/cost/"))

    def capacity(self) -> list[dict[str, Any]]:
        """The capacity signal for your teams' jobs: per pool and GPU model, the jobs waiting for
        capacity, the new nodes that would let them start (a sum, an upper bound) and the largest
        single request (``GET /api/v1/capacity/``)."""
        return list(self.http.get("capacity/").get("results") or [])

    def wait(
        self,
        job: JobRef,
        *,
        progress: bool = True,
        timeout_s: float | None = None,
        poll_s: float = 2.0,
        on_change: Callable[[Job], None] | None = None,
        file: IO[str] | None = None,
    ) -> Job:
        """Poll the job until it finishes (Succeeded, Failed or Cancelled) and return it.

        ``progress`` shows a bar with the state, queue position and estimated start (a widget in
        Jupyter, text on a terminal, on ``file`` or stderr). ``on_change(job)`` is called whenever the
        state or queue position changes. ``timeout_s`` raises ``WaitTimeout`` (with the job as last
        seen) instead of waiting longer; the job keeps running. Check ``job.state``: a failed job is
        returned, not raised.
        """
        ident = job_id(job)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        current = self.job(ident)
        bar = WaitProgress(current, file=file) if progress else None
        last: tuple[str, int | None] | None = None
        try:
            while True:
                if bar is not None:
                    bar.update(current)
                seen = (current.state, current.queue_position)
                if on_change is not None and seen != last:
                    on_change(current)
                last = seen
                if current.done:
                    return current
                if deadline is not None and time.monotonic() >= deadline:
                    raise WaitTimeout(f"job {ident} is still {current.state} after {timeout_s:g} s", job=current)
                pause = poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic()))
                self.sleep(pause)
                current = self.job(ident)
        finally:
            if bar is not None:
                bar.close()


__all__ = ["Job", "JobRef", "Portal", "PortalError", "Spec", "job_id", "new_idempotency_key"]
