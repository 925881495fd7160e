"""Human-readable text for the CLI (``--json`` prints the portal's JSON instead)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpuportal.progress import WAITING_STATES, clock, relative, status_text
from gpuportal.types import Check, Cost, Job, JobCost, Victim


def usd(amount: Decimal | None, currency: str = "USD") -> str:
    """``$7.34``; under a cent, the portal's 6 places without trailing zeros: ``$0.00098``."""
    if amount is None:
        return "?"
    sign = "$" if currency == "USD" else f"{currency} "
    if amount == 0 or abs(amount) >= Decimal("0.01"):
        return f"{sign}{amount.quantize(Decimal('0.01')):,}"
    return f"{sign}{amount.quantize(Decimal('0.000001')).normalize():f}"


def hours(value: Decimal) -> str:
    """Hours or GPUs as the portal gives them (6 places at most), without trailing zeros: ``0.000278``."""
    return f"{value.quantize(Decimal('0.000001')).normalize():f}"


def duration(delta: timedelta) -> str:
    """``1 h 05 min`` / ``12 min 30 s`` / ``45 s``."""
    exact = max(0.0, delta.total_seconds())
    if exact < 10:
        return f"{exact:.1f} s"
    seconds = round(exact)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


def when(moment: datetime | None, now: datetime | None = None) -> str:
    if moment is None:
        return "unknown"
    return f"{clock(moment)} ({relative(moment, now or datetime.now(UTC))})"


def resources(job: Job) -> str:
    """``2 GPUs`` / ``4 × 1 GPU`` / ``2 × 8 GPUs`` / ``0.25 GPU`` / ``MIG 3g.40gb`` / ``no GPU``."""
    if job.gpu:
        gpu = f"{job.gpu} GPU" + ("s" if job.gpu > 1 else "")
    elif job.gpu_milli:
        gpu = f"{job.gpu_milli / 1000:g} GPU"
    elif job.mig_profile:
        gpu = f"MIG {job.mig_profile}"
    elif job.gpu_memory_gib:
        gpu = f"{job.gpu_memory_gib} GiB GPU memory"
    else:
        gpu = "no GPU"
    return f"{job.replicas} × {gpu}" if job.replicas > 1 else gpu


def job_text(job: Job, now: datetime | None = None) -> str:
    """A few lines: identity, state line, placements, times."""
    now = now or datetime.now(UTC)
    title = f"job {job.id}" + (f" {job.name}" if job.name else "")
    lines = [
        f"{title}: {status_text(job, now, reason=False)}",
        f"  team {job.team}, queue {job.queue}, owner {job.owner}; {resources(job)}"
        + (f" on {job.gpu_model}" if job.gpu_model else ""),
    ]
    if job.state in WAITING_STATES and job.pending_reason and job.pending_reason.message:
        lines.append(f"  why: {job.pending_reason.message}")
    for placement in job.placements:
        replica = f"replica {placement.replica}" if placement.replica is not None else "replica"
        lines.append(f"  {replica}: {placement.describe()}")
    for label, moment in (
        ("submitted", job.created_at),
        ("started", job.started_at),
        ("finished", job.finished_at),
    ):
        if moment is not None:
            lines.append(f"  {label} {when(moment, now)}")
    return "\n".join(lines)


def cost_line(cost: Cost) -> str:
    price = (
        f" × {usd(cost.price_per_gpu_hour, cost.currency)}/GPU-hour"
        + (f" {cost.capacity_type}" if cost.capacity_type else "")
        if cost.price_per_gpu_hour is not None
        else ""
    )
    return (
        f"{hours(cost.gpu_hours)} GPU-hours{price} = {usd(cost.gpu_usd, cost.currency)} GPU"
        f" + {usd(cost.cpu_usd, cost.currency)} CPU + {usd(cost.memory_usd, cost.currency)} memory"
        f" = {usd(cost.total_usd, cost.currency)}" + (" an hour (it runs until stopped)" if cost.per_hour else "")
    )


def preempt_text(victim: Victim) -> str:
    """``job 12 sweep (nlp)``, or ``3 jobs of other teams`` for the ones the portal only counts."""
    if victim.job is None:
        return f"{victim.count} job{'s' if victim.count != 1 else ''} of other teams"
    return (
        f"job {victim.job}" + (f" {victim.name}" if victim.name else "") + (f" ({victim.team})" if victim.team else "")
    )


def check_text(check: Check, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    lines = []
    if check.runs_now:
        where = "; ".join(p.describe() for p in check.placements)
        lines.append(
            "runs now" + (f" on {check.gpu_model}" if check.gpu_model else "") + (f": {where}" if where else "")
        )
    elif check.waits:
        head = "waits" + (f": #{check.position} in queue" if check.position is not None else "")
        lines.append(head + (f", {check.reason.message}" if check.reason and check.reason.message else ""))
        if check.estimated_start_p50 is not None:
            p90 = f", P90 {when(check.estimated_start_p90, now)}" if check.estimated_start_p90 else ""
            lines.append(f"  estimated start {when(check.estimated_start_p50, now)}{p90}")
        elif check.no_estimate is not None and check.no_estimate.message:
            lines.append(f"  no start estimate: {check.no_estimate.message}")
        if check.preempts:
            lines.append("  would preempt " + ", ".join(preempt_text(v) for v in check.preempts))
    else:
        lines.append("never fits" + (f": {check.reason.message}" if check.reason and check.reason.message else ""))
    if check.cost is not None:
        lines.append(f"  estimated cost: {cost_line(check.cost)}")
    lines.extend(f"  sooner: {s.message}" for s in check.suggestions if s.message)
    return "\n".join(lines)


def job_cost_text(cost: JobCost) -> str:
    currency = cost.currency
    lines = [
        f"job {cost.job}: {hours(cost.gpu_hours)} GPU-hours; {usd(cost.gpu_usd, currency)} GPU"
        f" + {usd(cost.cpu_usd, currency)} CPU + {usd(cost.memory_usd, currency)} memory"
        f" = {usd(cost.total_usd, currency)} {currency}" + (" so far (running)" if cost.running else "")
    ]
    if cost.running and cost.estimated_total_usd is not None:
        lines[0] += f"; about {usd(cost.estimated_total_usd, currency)} when it ends"
    for index, run in enumerate(cost.runs, 1):
        start = clock(run.start) if run.start else "?"
        end = "now" if run.running else (clock(run.end) if run.end else "?")
        length = duration(run.end - run.start) if run.start and run.end else "?"
        if run.running and run.run_s is not None:
            length = duration(timedelta(seconds=run.run_s))
        price = f" at {usd(run.price_per_gpu_hour, currency)}/GPU-hour" if run.price_per_gpu_hour is not None else ""
        lines.append(
            f"  attempt {run.attempt or index}: {start}–{end} ({length}) "
            f"{run.gpu_model or 'CPU only'} {run.capacity_type}"
            + (f" ({run.outcome})" if run.outcome and not run.running else "")
            + ", "
            f"{hours(run.gpus)} GPU{'s' if run.gpus > 1 else ''} → {hours(run.gpu_hours)} GPU-hours{price};"
            f" total {usd(run.total_usd, currency)}"
        )
    if not cost.runs:
        lines.append("  it has not run")
    return "\n".join(lines)


def job_row(job: Job, *, costs: bool = False) -> tuple[str, ...]:
    figures = (hours(job.gpu_hours) if job.gpu_hours is not None else "-", usd(job.cost_usd)) if costs else ()
    return (
        str(job.id),
        job.name or "-",
        job.state + (f" #{job.queue_position}" if job.state == "Pending" and job.queue_position else ""),
        f"{job.team}/{job.queue}",
        resources(job),
        job.gpu_model or "-",
        *figures,
        job.created_at.astimezone().strftime("%Y-%m-%d %H:%M") if job.created_at else "-",
    )


def job_table(jobs: Iterable[Job]) -> str:
    """Aligned columns; GPU-hours and cost when the portal reports them."""
    listed = list(jobs)
    costs = any(job.cost_usd is not None for job in listed)
    head = ("ID", "NAME", "STATE", "TEAM/QUEUE", "GPU", "MODEL", *(("GPU-H", "COST") if costs else ()), "SUBMITTED")
    rows = [head, *(job_row(job, costs=costs) for job in listed)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)
