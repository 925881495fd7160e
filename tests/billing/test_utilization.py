"""Utilization sources (``billing.utilization``): efficiency through a real Prometheus server scraping a
DCGM-format exporter served by the test."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import UsageRecord
from billing.selectors.efficiency import job_efficiency_list, team_efficiency_list
from billing.services import metering_run
from billing.utilization import PrometheusUtilization, utilization_source
from tests.billing.conftest import Run, run_job

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DcgmExporter:
    """Serves ``/metrics`` like NVIDIA's dcgm-exporter with pod mapping: one series per GPU of a pod."""

    def __init__(self) -> None:
        self.series: list[tuple[dict[str, str], float, float]] = []  # labels, util %, FB used MiB
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = exporter.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add_gpu(self, *, namespace: str, pod: str, gpu: int, util_pct: float, fb_used_mib: float) -> None:
        labels = {
            "gpu": str(gpu),
            "UUID": f"GPU-{pod}-{gpu}",
            "device": f"nvidia{gpu}",
            "modelName": "NVIDIA A100-SXM4-80GB",
            "Hostname": "a100-0",
            "container": "main",
            "namespace": namespace,
            "pod": pod,
        }
        self.series.append((labels, util_pct, fb_used_mib))

    def render(self) -> str:
        lines = [
            "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
            "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        ]
        for labels, util, _ in self.series:
            lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{self._labels(labels)}}} {util}")
        lines += ["# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).", "# TYPE DCGM_FI_DEV_FB_USED gauge"]
        for labels, _, fb in self.series:
            lines.append(f"DCGM_FI_DEV_FB_USED{{{self._labels(labels)}}} {fb}")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _labels(labels: dict[str, str]) -> str:
        return ",".join(f'{k}="{v}"' for k, v in labels.items())


@pytest.fixture
def exporter():
    exporter = DcgmExporter()
    exporter.thread.start()
    yield exporter
    exporter.server.shutdown()
    exporter.server.server_close()


@pytest.fixture
def prometheus(tmp_path, exporter):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is not installed (Debian package 'prometheus', see apt-packages.txt)")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: dcgm\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{exporter.port}']\n"
    )
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {process.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for_samples(url: str, *, count: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    query = urllib.parse.urlencode({"query": "count_over_time(DCGM_FI_DEV_GPU_UTIL[1m])"})
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=2) as response:
            result = json.loads(response.read())["data"]["result"]
        if result and min(float(r["value"][1]) for r in result) >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"Prometheus did not scrape {count} samples in {timeout_s} s")


@pytest.mark.django_db
def test_efficiency_is_read_from_dcgm_metrics_through_prometheus(world, exporter, prometheus, settings):
    start = timezone.now() - timedelta(seconds=2)
    idle = run_job(world, gpu=2, runs=[Run(start, None)])
    busy = run_job(world, gpu=0, gpu_milli=500, runs=[Run(start, None)])
    other = run_job(world, team="nlp", gpu=1, runs=[Run(start, None)])
    ns = "team-vision"
    # The idle job: two GPUs at 10 % and 30 % (average 20 %); the busy one at 96 %.
    exporter.add_gpu(namespace=ns, pod=f"job-{idle.job.pk}-a1-r0", gpu=0, util_pct=10, fb_used_mib=2000)
    exporter.add_gpu(namespace=ns, pod=f"job-{idle.job.pk}-a1-r0", gpu=1, util_pct=30, fb_used_mib=4000)
    exporter.add_gpu(namespace=ns, pod=f"job-{busy.job.pk}-a1-r0", gpu=2, util_pct=96, fb_used_mib=30000)
    # Same pod name in another namespace: must not be mixed into the vision job.
    exporter.add_gpu(namespace="team-nlp", pod=f"job-{idle.job.pk}-a1-r0", gpu=3, util_pct=100, fb_used_mib=1)
    wait_for_samples(prometheus, count=4)

    from portal.jobs.states import JobState
    from portal.jobs.transitions import job_transition

    end = timezone.now()
    for history in (idle, busy, other):
        job_transition(job=history.job, to_state=JobState.SUCCEEDED, at=end, actor="cluster")

    settings.PROMETHEUS_URL = prometheus
    source = utilization_source()
    assert isinstance(source, PrometheusUtilization)
    assert metering_run(source=source) == 3

    records = {r.job_id: r for r in UsageRecord.objects.all()}
    assert records[idle.job.pk].gpu_util_pct == pytest.approx(20.0)
    assert records[idle.job.pk].gpu_fb_used_mib == pytest.approx(3000.0)
    assert records[busy.job.pk].gpu_util_pct == pytest.approx(96.0)
    assert records[other.job.pk].gpu_util_pct is None  # no series for it: unknown, not zero

    jobs = job_efficiency_list(teams=[world.teams["vision"], world.teams["nlp"]], since=start - timedelta(hours=1))
    by_id = {j.job_id: j for j in jobs}
    assert "request 1 GPU(s) instead of 2" in by_id[idle.job.pk].recommendation
    assert "GPU-bound" in by_id[busy.job.pk].recommendation
    assert by_id[other.job.pk].recommendation == ""
    teams = {t.team: t for t in team_efficiency_list(teams=[world.teams["vision"]], since=start - timedelta(hours=1))}
    # GPU-hour weighted: 2 GPUs at 20 %, half a GPU at 96 % → 35.2 %.
    assert teams["vision"].gpu_util_pct == pytest.approx(35.2, abs=0.2)


def test_an_unreachable_prometheus_leaves_utilization_unknown():
    source = PrometheusUtilization(url=f"http://127.0.0.1:{free_port()}", timeout_s=0.5)
    now = timezone.now()
    result = source.job_utilization(job_id=1, namespace="x", start=now - timedelta(minutes=5), end=now)
    assert (result.gpu_util_pct, result.fb_used_mib) == (None, None)
