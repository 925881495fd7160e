"""Locust scenario of the load benchmark (``bench/bench_load.py`` starts it; see there).

Each simulated user is a team member with an API token: 80 % reads (the job list, one job, cost
allocation of the last week), 20 % submissions. ``BENCH_LOAD_DATA`` names a JSON file with the
users' tokens and their teams' job ids.
"""

from __future__ import annotations

import itertools
import json
import os
import random

from locust import FastHttpUser, constant_throughput, task

DATA = json.loads(open(os.environ["BENCH_LOAD_DATA"]).read())  # noqa: SIM115 - read once at start
USERS = itertools.cycle(DATA["users"])
RATE = float(os.environ.get("BENCH_LOAD_USER_RPS", "2"))


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
