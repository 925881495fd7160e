"""The progress bar of ``Portal.wait``: the job's state, queue position and estimated start, live.

tqdm's ``auto`` flavour draws it: a widget in Jupyter (with ``ipywidgets``; ``pip install
gpuportal[notebook]``), text on a terminal (and as a fallback in a notebook without widgets). The bar
follows the current phase:

* waiting (Pending, Admitted, Preempted): it fills as the job moves up the queue (from the largest
  position seen to the front), the text says the position, the estimated start and why it waits;
* Running: it fills with time when the portal gives an expected end, else it shows where it runs;
* finished: full, green for Succeeded, red for Failed or Cancelled.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import IO, Any

from tqdm.auto import tqdm

from gpuportal.types import Job

WAITING_STATES = frozenset({"Pending", "Admitted", "Preempted"})
BAR_FORMAT = "{desc} |{bar}| {status} [{elapsed}]"
REASON_CHARS = 90
NO_ESTIMATE = {  # the portal's estimate_note: why a waiting job has no estimated start
    "never": "no start estimate: never fits as configured",
    "horizon": "no start estimate: beyond the forecast's horizon",
    "budget": "no start estimate: held by the team's budget",
}


MIN_BAR = 10  # columns the bar keeps on a narrow terminal; the status text is cut instead
FIXED = len(" || [00:00:00]") + MIN_BAR


class _Bar(tqdm):  # type: ignore[misc,valid-type]  # tqdm.auto picks its class at import time
    """tqdm with one more field, ``{status}``, for the state text (``postfix`` would prefix ", ").

    On a terminal the text is cut to the line (most important first: state, position, start; the
    reason last), so the bar is redrawn in place instead of wrapping onto new lines."""

    status = ""

    @property
    def format_dict(self) -> dict[str, Any]:
        values = dict(super().format_dict)
        status = self.status
        if values.get("ncols"):  # a terminal (the notebook widget has no width and wraps by itself)
            room = int(values["ncols"]) - len(str(values.get("prefix") or "")) - FIXED
            if len(status) > room:
                status = status[: max(0, room - 1)] + "…"
        values["status"] = status
        return values


def relative(moment: datetime, now: datetime) -> str:
    """``in 12 min`` / ``in 2 h 5 min`` / ``now``; ``5 min ago`` / ``just now`` for the past."""
    delta = (moment - now).total_seconds()
    seconds = int(abs(delta))
    if seconds < 60:
        return "now" if delta >= 0 else "just now"
    minutes = seconds // 60
    text = f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"
    return f"in {text}" if delta >= 0 else f"{text} ago"


def clock(moment: datetime) -> str:
    """A time in the viewer's local zone: ``14:05``, with the date when it is not today."""
    local = moment.astimezone()
    if local.date() == datetime.now().astimezone().date():
        return local.strftime("%H:%M")
    return local.strftime("%Y-%m-%d %H:%M")


def status_text(job: Job, now: datetime | None = None, *, reason: bool = True) -> str:
    """One line for a job's state: ``Pending · #3 in queue · start ~14:05 (in 12 min) · quota: …``
    (the reason cut to ``REASON_CHARS``; ``reason=False`` leaves it out)."""
    now = now or datetime.now(UTC)
    parts = [job.state or "?"]
    if job.state in WAITING_STATES:
        if job.queue_position is not None:
            parts.append(f"#{job.queue_position} in queue")
        if job.estimated_start is not None:
            parts.append(f"start ~{clock(job.estimated_start)} ({relative(job.estimated_start, now)})")
            if job.estimated_start_p90 is not None and job.estimated_start_p90 > job.estimated_start:
                parts[-1] += f", P90 {clock(job.estimated_start_p90)}"
        elif job.estimate_note in NO_ESTIMATE:
            parts.append(NO_ESTIMATE[job.estimate_note])
        if job.state == "Pending" and job.queue_position is None and job.pending_reason is None:
            parts.append("waiting for the scheduler's next cycle")
        if reason and job.pending_reason and job.pending_reason.message:
            message = job.pending_reason.message
            parts.append(message if len(message) <= REASON_CHARS else message[: REASON_CHARS - 1] + "…")
    elif job.state == "Running":
        nodes = sorted({p.node for p in job.placements if p.node})
        if nodes:
            parts.append("on " + ", ".join(nodes) + (f" ({job.gpu_model})" if job.gpu_model else ""))
        if job.expected_end is not None:
            parts.append(f"ends ~{clock(job.expected_end)} ({relative(job.expected_end, now)})")
    elif job.message and job.state != "Succeeded":
        parts.append(job.message)
    return " · ".join(parts)


class WaitProgress:
    """A bar for one job; ``update(job)`` after each poll, ``close(job)`` at the end."""

    def __init__(self, job: Job, *, file: IO[str] | None = None) -> None:
        self.phase = ""
        self.front = 0  # the largest queue position seen in this waiting phase
        self.bar = _Bar(
            total=None,
            desc=f"job {job.id}" + (f" {job.name}" if job.name else ""),
            bar_format=BAR_FORMAT,
            file=file,
            leave=True,
            dynamic_ncols=True,
        )
        self.update(job)

    def update(self, job: Job, now: datetime | None = None) -> None:
        now = now or datetime.now(UTC)
        self.bar.status = status_text(job, now)
        if job.done:
            total = self.bar.total or 1
            self._set(self.phase, total, total)
            self.bar.colour = "green" if job.succeeded else "red"
        elif job.state in WAITING_STATES:
            if self.phase != "waiting":
                self.front = 0
            if job.queue_position is not None:
                self.front = max(self.front, job.queue_position)
                self._set("waiting", self.front, self.front - job.queue_position)
            elif self.phase != "waiting":
                self._set("waiting", None, 0)
        elif job.state == "Running":
            end, start = job.expected_end, job.started_at
            if end is not None and start is not None and end > start:
                total_s = round((end - start).total_seconds())
                self._set("running", total_s, min(total_s, max(0, round((now - start).total_seconds()))))
            else:
                self._set("running", None, 0)
        self.bar.refresh()

    def _set(self, phase: str, total: float | None, n: float) -> None:
        """Show ``n`` of ``total`` in ``phase``; a new phase or scale resets the bar, not its clock."""
        if phase != self.phase or total != self.bar.total:
            started = self.bar.start_t
            self.bar.reset(total=total)  # the notebook widget learns its new maximum here
            self.bar.start_t = started
            self.phase = phase
        self.bar.n = n

    def close(self, job: Job | None = None) -> None:
        if job is not None:
            self.update(job)
        self.bar.close()
