"""A user's choices: their default notifications, a job's own, their e-mail address and webhook."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from portal.jobs.errors import ServiceError
from portal.jobs.models import Job
from portal.notifications.models import NotificationPreference, WebhookEndpoint
from portal.notifications.services.delivery import webhook_url_problem
from portal.notifications.signing import new_secret

PREFERENCE_FIELDS = ("email", "webhook", "on_succeeded", "on_failed", "on_preempted", "started_after_wait_min")


def preference_save(*, user, job: Job | None = None, values: dict[str, Any]) -> NotificationPreference:
    """Set the user's default (``job`` None) or one job's choice; only the job's owner chooses for it."""
    if job is not None and job.owner_id != user.pk:
        raise ServiceError("only the job's owner chooses its notifications", status_code=403)
    unknown = sorted(set(values) - set(PREFERENCE_FIELDS))
    if unknown:
        raise ServiceError(f"unknown field {unknown[0]!r}", field=unknown[0])
    with transaction.atomic():
        preference, _ = NotificationPreference.objects.select_for_update().get_or_create(user=user, job=job)
        for name, value in values.items():
            setattr(preference, name, value)
        preference.save()
    return preference


def preference_reset(*, user, job: Job) -> None:
    """The job follows the user's default again."""
    NotificationPreference.objects.filter(user=user, job=job).delete()


def email_address_set(*, user, address: str) -> None:
    user.email = address
    user.save(update_fields=["email"])


def webhook_set(*, user, url: str) -> str | None:
    """Point the user's webhook at ``url``; returns the new secret when one was made (the first time),
    to be shown once. A URL the portal would not POST to is refused, naming ``url``."""
    if problem := webhook_url_problem(url):
        raise ServiceError(problem, field="url")
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.select_for_update().filter(user=user).first()
        if endpoint is not None:
            endpoint.url = url
            endpoint.save(update_fields=["url"])
            return None
        secret = new_secret()
        WebhookEndpoint.objects.create(user=user, url=url, secret=secret, secret_prefix=secret[:10])
        return secret


def webhook_secret_rotate(*, user) -> str:
    """A new secret for the user's webhook (the old one stops signing at once); shown once."""
    secret = new_secret()
    updated = WebhookEndpoint.objects.filter(user=user).update(secret=secret, secret_prefix=secret[:10])
    if not updated:
        raise ServiceError("set a webhook URL first", field="url", status_code=409)
    return secret


def webhook_remove(*, user) -> None:
    WebhookEndpoint.objects.filter(user=user).delete()
