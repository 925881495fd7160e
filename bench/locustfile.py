"""Locust scenario of the load benchmark (``bench/bench_load.py`` starts it; see there).

Each simulated user is a team member with an API token: 80 % reads (the job list, one job, cost
allocation of the last week), 20 % submissions. ``BENCH_LOAD_DATA`` names a JSON file with the
users' tokens and their teams' job ids. With ``BENCH_LOAD_LOG`` set, every request's end time, name
and latency are written there (CSV) when the run ends: the benchmark prints when its slowest came.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time

from locust import FastHttpUser, constant_throughput, events, task

DATA = json.loads(open(os.environ["BENCH_LOAD_DATA"]).read())  # noqa: SIM115 - read once at start
USERS = itertools.cycle(DATA["users"])
RATE = float(os.environ.get("BENCH_LOAD_USER_RPS", "2"))
LOG = os.environ.get("BENCH_LOAD_LOG", "")
_requests: list[tuple[float, str, float]] = []  # (end time, name, latency ms)


@events.request.add_listener
def _record(request_type, name, response_time, response_length, exception, **kwargs) -> None:
    _requests.append((time.time(), name, response_time))


@events.quitting.add_listener
def _write(environment, **kwargs) -> None:
    if LOG:
        with open(LOG, "w") as handle:
            handle.writelines(f"{at:.3f},{name},{ms:.1f}\n" for at, name, ms in _requests)


class PortalUser(FastHttpUser):
    wait_time = constant_throughput(RATE)

    def on_start(self) -> None:
        user = next(USERS)
        self.headers = {"Authorization": f"Token {user['token']}"}
        self.job_ids = user["job_ids"]
        self.rng = random.Random(user["token"])

    @task(4)
    def job_list(self) -> None:
        self.client.get("/api/v1/jobs/?page_size=20", headers=self.headers, name="GET /api/v1/jobs/")

    @task(3)
    def job_detail(self) -> None:
        job_id = self.rng.choice(self.job_ids)
        self.client.get(f"/api/v1/jobs/{job_id}/", headers=self.headers, name="GET /api/v1/jobs/{id}/")

    @task(1)
    def cost_allocation(self) -> None:
        self.client.get(
            "/api/v1/cost/allocation?window=7d&aggregate=namespace",
            headers=self.headers,
            name="GET /api/v1/cost/allocation",
        )

    @task(2)
    def submit(self) -> None:
        body = {"queue": "default", "image": "nvcr.io/nvidia/pytorch:24.08-py3", "gpu": 1, "runtime_s": 600}
        self.client.post("/api/v1/jobs/", json=body, headers=self.headers, name="POST /api/v1/jobs/")
