"""Sending one notification: an e-mail (Django's mail) or a signed JSON POST to the user's webhook.

``notification_deliver`` locks the row and sends only while it is pending, so a retried or doubled
task never sends twice; a failed try is recorded (``tries``, ``last_error``, ``next_try_at`` after
``retry_backoff_s``) and raised as ``DeliveryFailed`` for the task to retry then (the sweep retries
what a task did not); after ``NOTIFY_RETRIES`` tries the notification is failed.

Webhooks go only to public addresses unless ``NOTIFY_WEBHOOK_ALLOW_PRIVATE`` (a user's URL must not
reach the portal's own network), and are not redirected (a redirect could lead there).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from billing.selectors import job_costs
from portal.jobs.models import Job, JobAttempt
from portal.notifications.models import Channel, Event, Notification, WebhookEndpoint
from portal.notifications.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    signature,
)
from scheduling.selectors import runtime_speedup


class DeliveryFailed(Exception):
    """A try that failed (the receiver is down, answered 5xx, the mail server refused). ``final``: it
    was the last of ``NOTIFY_RETRIES`` and the notification is now failed; else it is tried again at
    its ``next_try_at``."""

    final = False


def retry_backoff_s(tries: int) -> float:
    """Seconds before try ``tries + 1``: ``NOTIFY_BACKOFF_S`` doubling per try, at most ``NOTIFY_BACKOFF_MAX_S``."""
    return min(settings.NOTIFY_BACKOFF_MAX_S, settings.NOTIFY_BACKOFF_S * 2 ** max(0, tries - 1))


def webhook_url_problem(url: str) -> str | None:
    """Why the portal will not POST to ``url`` (None when it will): not http(s), no host, or (unless
    ``NOTIFY_WEBHOOK_ALLOW_PRIVATE``) a host that resolves to a loopback, private, link-local or other
    non-public address."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "a webhook is an http:// or https:// URL with a host"
    if settings.NOTIFY_WEBHOOK_ALLOW_PRIVATE:
        return None
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(parts.hostname, parts.port or 443)}
    except OSError as exc:
        return f"cannot resolve {parts.hostname}: {exc}"
    for address in addresses:
        if not ipaddress.ip_address(address.split("%", 1)[0]).is_global:
            return f"{parts.hostname} resolves to {address}, which is not a public address"
    return None


def notification_payload(notification: Notification, *, now: datetime) -> dict[str, Any]:
    """The webhook body (and the e-mail's figures): the event, the job, where it ran, what it cost."""
    job = Job.objects.select_related("team", "local_queue", "owner").get(pk=notification.job_id)
    attempt = JobAttempt.objects.filter(job=job, number=notification.attempt).first()
    cost = job_costs(jobs=[job], now=now, speedup=runtime_speedup())[job.pk]
    return {
        "event": notification.event,
        "delivery": notification.pk,
        "occurred_at": notification.occurred_at.isoformat(),
        "job": {
            "id": job.pk,
            "name": job.name,
            "state": job.state,
            "team": job.team.slug,
            "queue": job.local_queue.name,
            "owner": job.owner.get_username(),
            "url": settings.PORTAL_URL.rstrip("/") + reverse("job-detail", args=[job.pk]),
            "message": job.message,
            "checkpoint_path": job.checkpoint_path,
            "attempt": notification.attempt,
            "gpu_model": attempt.gpu_model if attempt else "",
            "nodes": attempt.nodes if attempt else [],
            "waited_s": round(attempt.waited_s(), 3) if attempt else None,
            "run_s": round(cost.run_s, 3),
            "gpu_hours": str(cost.gpu_hours),
            "cost_usd": str(cost.cost_usd),
            "estimated_total_usd": None if cost.estimated_total_usd is None else str(cost.estimated_total_usd),
        },
    }


def _send_email(notification: Notification, payload: dict[str, Any]) -> None:
    job = payload["job"]
    title = f"Job {job['id']}" + (f" ({job['name']})" if job["name"] else "")
    what = Event(notification.event).label
    lines = [
        f"{title} {what} at {notification.occurred_at:%Y-%m-%d %H:%M:%S} UTC (attempt {job['attempt']}).",
        f"State now: {job['state']}. {job['message']}".strip(),
        f"Ran on: {job['gpu_model'] or 'CPU'} on {', '.join(job['nodes']) or '-'}",
        *([f"Checkpoint: {job['checkpoint_path']} (resume from it)"] if job["checkpoint_path"] else []),
        f"Run time so far: {job['run_s']:.0f} s, GPU-hours: {job['gpu_hours']}, cost: ${job['cost_usd']}",
        "",
        job["url"],
        "",
        f"Choose what you are told about on {settings.PORTAL_URL.rstrip('/')}{reverse('notification-settings')}",
    ]
    try:
        send_mail(
            f"[GPU portal] {title} {what}",
            "\n".join(lines),
            settings.DEFAULT_FROM_EMAIL,
            [notification.user.email],
        )
    except (OSError, ConnectionError) as exc:  # smtplib's errors are OSErrors
        raise DeliveryFailed(f"mail: {exc}") from exc


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl} refused", headers, fp)


def _send_webhook(notification: Notification, payload: dict[str, Any]) -> None:
    endpoint = WebhookEndpoint.objects.filter(user_id=notification.user_id).first()
    if endpoint is None:
        raise DeliveryFailed("the user has no webhook any more")
    if problem := webhook_url_problem(endpoint.url):
        raise DeliveryFailed(problem)
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    stamp = int(time.time())
    request = urllib.request.Request(
        endpoint.url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "gpu-portal-webhook/1",
            EVENT_HEADER: notification.event,
            DELIVERY_HEADER: str(notification.pk),
            TIMESTAMP_HEADER: str(stamp),
            SIGNATURE_HEADER: signature(endpoint.secret, stamp, body),
        },
    )
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=settings.NOTIFY_WEBHOOK_TIMEOUT_S) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        raise DeliveryFailed(f"webhook answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise DeliveryFailed(f"webhook unreachable: {exc}") from exc
    if not 200 <= status < 300:
        raise DeliveryFailed(f"webhook answered HTTP {status}")


def notification_deliver(*, notification_id: int, now: datetime | None = None) -> bool:
    """Send one notification if it is still pending; True when this call sent it.

    The row lock (``skip_locked``) makes a second task for the same row skip it while the first
    sends; the status check makes a late duplicate a no-op. A failed try is committed before
    ``DeliveryFailed`` is raised, so its count and error survive for the retry."""
    now = now or timezone.now()
    failure: DeliveryFailed | None = None
    with transaction.atomic():
        notification = (
            Notification.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("user")
            .filter(pk=notification_id, status=Notification.Status.PENDING)
            .first()
        )
        if notification is None:
            return False
        notification.tries += 1
        try:
            payload = notification_payload(notification, now=now)
            (_send_email if notification.channel == Channel.EMAIL else _send_webhook)(notification, payload)
        except DeliveryFailed as exc:
            failure = exc
            notification.last_error = str(exc)[:500]
            if notification.tries >= settings.NOTIFY_RETRIES:
                exc.final = True
                notification.status = Notification.Status.FAILED
                notification.next_try_at = None
            else:
                notification.next_try_at = now + timedelta(seconds=retry_backoff_s(notification.tries))
        else:
            notification.status = Notification.Status.SENT
            notification.sent_at = timezone.now()
            notification.last_error = ""
            notification.next_try_at = None
        notification.save(update_fields=["tries", "status", "sent_at", "last_error", "next_try_at"])
    if failure is not None:
        raise failure
    return True
