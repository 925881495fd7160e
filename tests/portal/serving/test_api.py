"""/api/v1/services/: create, 400s naming the field, the autoscaler's samples, stop, and the bill:
replica-hours priced like any job (recomputed here from the seed's list prices)."""

from __future__ import annotations

import math
import threading
from datetime import timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from billing.services import price_book_seed_defaults
from portal.serving.load import service_load
from portal.serving.models import InferenceService
from portal.serving.services import services_autoscale
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db
BODY = {
    "name": "chat",
    "queue": "default",
    "image": "vllm/vllm-openai:v0.6.0",
    "model_family": "llama",
    "model_size_b": 13,
    "min_replicas": 1,
    "max_replicas": 3,
    "metric": "rps",
    "target_per_replica": 20,
}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"min_replicas": 3, "max_replicas": 2}, "min_replicas"),
        ({"model_size_b": 700}, "model_size_b"),
        ({"metric": "gpu"}, "metric"),
        ({"target_per_replica": 0}, "target_per_replica"),
        ({"replicas": 2}, "replicas"),
        ({"queue": "nope"}, "queue"),
    ],
)
def test_a_bad_service_is_a_400_naming_the_field(api, changes, field):
    response = api("alice").post("/api/v1/services/", {**BODY, **changes}, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"]


def test_a_service_is_billed_per_replica_hour_at_the_price_book(api, world):
    price_book_seed_defaults()
    alice = api("alice")
    created = alice.post("/api/v1/services/", BODY, format="json")
    assert created.status_code == 201, created.json()
    service_id = created.json()["id"]
    start = timezone.now() - timedelta(hours=3)
    backend = SimulatedCluster(speedup=1)
    cycle_run(now=start, backend=backend)
    cycle_run(now=start + timedelta(seconds=1), backend=backend)
    body = alice.get(f"/api/v1/services/{service_id}/").json()
    assert [r["state"] for r in body["replicas"]] == ["Running"]
    stopped = alice.post(f"/api/v1/services/{service_id}/stop/")
    assert stopped.json()["state"] == "stopped"
    body = alice.get(f"/api/v1/services/{service_id}/").json()
    hours = Decimal(body["replica_hours"])
    assert hours == pytest.approx(Decimal(3), abs=Decimal("0.01"))  # one replica, from start+1 s to now
    # One A100 (13B = 26 GiB), 4 cores, 32 GiB: the seed's on-demand list prices per hour.
    per_hour = Decimal("3.67") + 4 * Decimal("0.031611") + 32 * Decimal("0.004237")
    assert Decimal(body["gpu_hours"]) == pytest.approx(hours, abs=Decimal("0.000002"))
    assert Decimal(body["cost_usd"]) == pytest.approx(per_hour * hours, abs=Decimal("0.00001"))
    assert api("bob").get(f"/api/v1/services/{service_id}/").status_code == 404


def test_samples_show_replicas_against_the_simulated_load(api, world, settings):
    settings.PROMETHEUS_URL = ""
    created = api("alice").post("/api/v1/services/", BODY, format="json").json()
    now = timezone.now()
    for step in range(4):
        services_autoscale(now=now + timedelta(seconds=15 * step))
    samples = api("alice").get(f"/api/v1/services/{created['id']}/samples/").json()
    assert len(samples) == 4
    assert {s["source"] for s in samples} == {"simulated"}
    for sample in samples:
        wanted = max(1, min(3, math.ceil(sample["load"] / 20)))
        assert sample["recommended"] == wanted


class _Prometheus(BaseHTTPRequestHandler):
    queries: list[str] = []

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        from urllib.parse import parse_qs, urlparse

        type(self).queries.append(parse_qs(urlparse(self.path).query)["query"][0])
        data = (
            b'{"status":"success","data":{"resultType":"vector","result":'
            b'[{"metric":{},"value":[1,"42.5"]},{"metric":{},"value":[1,"7.5"]}]}}'
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_with_prometheus_the_load_is_the_servers_query(world, api, settings):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings.PROMETHEUS_URL = f"http://127.0.0.1:{server.server_address[1]}"
        api("alice").post("/api/v1/services/", BODY, format="json")
        service = InferenceService.objects.get()
        load = service_load(service, now=timezone.now())
        assert (load.value, load.source) == (50.0, "prometheus")
        assert _Prometheus.queries[-1] == 'sum(rate(http_requests_total{namespace="team-vision",service="chat"}[1m]))'
        settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # nothing listens: no reading, no change
        assert service_load(service, now=timezone.now()) is None
    finally:
        server.shutdown()
        server.server_close()
