"""Forms of the notification settings page and a job's notification choice."""

from __future__ import annotations

from django import forms

from portal.notifications.models import NotificationPreference


class PreferenceForm(forms.ModelForm):
    class Meta:
        model = NotificationPreference
        fields = ["email", "webhook", "on_succeeded", "on_failed", "on_preempted", "started_after_wait_min"]
        labels = {"email": "By e-mail", "webhook": "By webhook"}
        help_texts = {"email": "", "webhook": "", "started_after_wait_min": "empty: never"}


class EmailForm(forms.Form):
    address = forms.EmailField(label="E-mail address", required=False)


class WebhookForm(forms.Form):
    url = forms.URLField(label="Webhook URL", max_length=500, assume_scheme="https")
