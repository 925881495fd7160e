"""``gpuportal.progress``: the bar of ``Portal.wait`` on a text stream (the terminal flavour; the widget
flavour runs in tests/client/test_examples.py)."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

from gpuportal.progress import WaitProgress, relative, status_text
from gpuportal.types import Job

NOW = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def job(**fields) -> Job:
    return Job.from_api({"id": 7, "name": "resnet", "state": "Pending", **fields})


def test_the_status_line_says_position_estimated_start_and_why():
    waiting = job(
        queue_position=3,
        estimated_start=(NOW + timedelta(minutes=12)).isoformat(),
        pending_reason={"kind": "quota", "message": "cq-vision: 8 of 8 A100-80GB in use"},
    )
    text = status_text(waiting, NOW)
    assert text.startswith("Pending · #3 in queue · start ~")
    assert "(in 12 min)" in text
    assert text.endswith("cq-vision: 8 of 8 A100-80GB in use")
    p90 = job(
        queue_position=1, estimated_start=NOW.isoformat(), estimated_start_p90=(NOW + timedelta(hours=1)).isoformat()
    )
    assert ", P90 " in status_text(p90, NOW)
    assert "beyond the forecast's horizon" in status_text(job(queue_position=40, estimate_note="horizon"), NOW)
    running = job(state="Running", gpu_model="A100-80GB", placements=[{"node": "a100-0"}, {"node": "a100-1"}])
    assert status_text(running, NOW) == "Running · on a100-0, a100-1 (A100-80GB)"
    failed = job(state="Failed", message="pods never started")
    assert status_text(failed, NOW) == "Failed · pods never started"
    long_reason = job(pending_reason={"kind": "x", "message": "y" * 200})
    assert len(status_text(long_reason, NOW)) < 120
    assert status_text(job(), NOW) == "Pending · waiting for the scheduler's next cycle"


def test_on_a_narrow_terminal_the_text_is_cut_so_the_line_never_wraps():
    stream = io.StringIO()
    reason = {"kind": "quota", "message": "queue cq-vision uses 8 of 8 H100-80GB GPUs and needs 16 more " * 3}
    bar = WaitProgress(job(queue_position=2, pending_reason=reason), file=stream)
    bar.bar.ncols = 100
    bar.bar.dynamic_ncols = False
    bar.update(job(queue_position=1, pending_reason=reason), NOW)
    last = stream.getvalue().split("\r")[-1].rstrip()  # padded with blanks over the longer first line
    assert len(last) <= 100
    assert "#1 in queue" in last
    assert last.endswith("]")  # the clock is still there
    bar.close()


def test_relative_times():
    assert relative(NOW + timedelta(seconds=30), NOW) == "now"
    assert relative(NOW - timedelta(seconds=30), NOW) == "just now"
    assert relative(NOW + timedelta(minutes=125), NOW) == "in 2 h 5 min"
    assert relative(NOW - timedelta(minutes=5), NOW) == "5 min ago"


def test_the_bar_fills_as_the_job_moves_up_the_queue_then_with_its_run_and_ends_full():
    stream = io.StringIO()
    bar = WaitProgress(job(queue_position=4), file=stream)
    assert (bar.bar.n, bar.bar.total) == (0, 4)
    bar.update(job(queue_position=2), NOW)
    assert (bar.bar.n, bar.bar.total) == (2, 4)  # two of the four places ahead are gone
    bar.update(job(queue_position=1), NOW)
    assert (bar.bar.n, bar.bar.total) == (3, 4)
    started = NOW - timedelta(minutes=15)
    running = job(
        state="Running", started_at=started.isoformat(), expected_end=(started + timedelta(hours=1)).isoformat()
    )
    bar.update(running, NOW)
    assert (bar.bar.n, bar.bar.total) == (900, 3600)  # a quarter of its expected hour
    bar.close(job(state="Succeeded"))
    assert bar.bar.n == bar.bar.total
    out = stream.getvalue()
    assert "job 7 resnet |" in out
    assert "#4 in queue" in out
    assert "#2 in queue" in out
    assert "Running" in out
    assert out.rstrip().split("\r")[-1].startswith("job 7 resnet |")
    assert "Succeeded" in out.rstrip().split("\r")[-1]
