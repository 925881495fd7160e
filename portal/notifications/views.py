"""The notification settings page (a user's default, e-mail address, webhook) and a job's own choice."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render

from portal.jobs.errors import ServiceError
from portal.jobs.selectors import job_get
from portal.notifications import selectors
from portal.notifications.forms import EmailForm, PreferenceForm, WebhookForm
from portal.notifications.services import preferences
from portal.notifications.services.events import default_preference
from portal.notifications.signing import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER


def _values(form: PreferenceForm) -> dict:
    return {name: form.cleaned_data[name] for name in preferences.PREFERENCE_FIELDS}


@login_required
def notification_settings(request):
    user = request.user
    current = selectors.preference_get(user=user) or default_preference()
    preference_form = PreferenceForm(instance=current)
    email_form = EmailForm(initial={"address": user.email})
    webhook = selectors.webhook_get(user=user)
    webhook_form = WebhookForm(initial={"url": webhook.url if webhook else ""})
    new_secret = None
    status = 200
    if request.method == "POST":
        action = request.POST.get("action")
        try:
            if action == "preferences":
                preference_form = PreferenceForm(request.POST, instance=current)
                email_form = EmailForm(request.POST)
                if preference_form.is_valid() and email_form.is_valid():
                    preferences.preference_save(user=user, values=_values(preference_form))
                    preferences.email_address_set(user=user, address=email_form.cleaned_data["address"])
                    messages.success(request, "Notification settings saved.")
                    return redirect("notification-settings")
            elif action == "webhook":
                webhook_form = WebhookForm(request.POST)
                if webhook_form.is_valid():
                    new_secret = preferences.webhook_set(user=user, url=webhook_form.cleaned_data["url"])
                    messages.success(request, "Webhook saved.")
            elif action == "rotate":
                new_secret = preferences.webhook_secret_rotate(user=user)
                messages.success(request, "New webhook secret made; the old one no longer signs.")
            elif action == "remove":
                preferences.webhook_remove(user=user)
                messages.success(request, "Webhook removed.")
                return redirect("notification-settings")
        except ServiceError as exc:
            webhook_form.add_error("url" if exc.field == "url" else None, exc.message)
        if preference_form.errors or email_form.errors or webhook_form.errors:
            status = 400
    webhook = selectors.webhook_get(user=user)
    return render(
        request,
        "notifications/settings.html",
        {
            "preference_form": preference_form,
            "email_form": email_form,
            "webhook_form": webhook_form,
            "webhook": webhook,
            "new_secret": new_secret,
            "recent": selectors.notification_list(user=user)[:20],
            "headers": {
                "event": EVENT_HEADER,
                "delivery": DELIVERY_HEADER,
                "timestamp": TIMESTAMP_HEADER,
                "signature": SIGNATURE_HEADER,
            },
        },
        status=status,
    )


@login_required
def job_notifications(request, pk: int):
    """A job's own notification choice (its owner only), or back to the owner's default."""
    job = job_get(user=request.user, pk=pk)
    if job is None or job.owner_id != request.user.pk:
        raise Http404("No such job of yours")
    own = selectors.preference_get(user=request.user, job=job)
    default = selectors.preference_get(user=request.user) or default_preference()
    form = PreferenceForm(instance=own or default)
    if request.method == "POST":
        if request.POST.get("action") == "default":
            preferences.preference_reset(user=request.user, job=job)
            messages.success(request, f"Job {job.pk} follows your default notifications.")
            return redirect("job-detail", pk=job.pk)
        form = PreferenceForm(request.POST, instance=own or default)
        if form.is_valid():
            preferences.preference_save(user=request.user, job=job, values=_values(form))
            messages.success(request, f"Notifications for job {job.pk} saved.")
            return redirect("job-detail", pk=job.pk)
    return render(
        request,
        "notifications/job.html",
        {"job": job, "form": form, "own": own, "recent": selectors.notification_list(user=request.user, job=job)},
        status=400 if form.errors else 200,
    )
