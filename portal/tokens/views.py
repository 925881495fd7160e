"""The API tokens page (create — the key shown once, with the lines that configure the ``gpuportal``
client —, name, list, revoke) and the login lockout page."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.jobs.errors import ServiceError
from portal.tokens.models import ApiToken
from portal.tokens.selectors import api_token_list
from portal.tokens.services import api_token_create, api_token_revoke


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What it is for, e.g. 'laptop notebook'.")
    expires_in_days = forms.IntegerField(
        min_value=1, max_value=3650, required=False, help_text="Empty = never expires.", label="Expires in (days)"
    )


@login_required
def token_list(request):
    new_key = None
    if request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            days = form.cleaned_data["expires_in_days"]
            expires_at = timezone.now() + timedelta(days=days) if days else None
            try:
                token, new_key = api_token_create(
                    user=request.user, name=form.cleaned_data["name"], expires_at=expires_at
                )
            except ServiceError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                messages.success(request, f"Token {token.name!r} created. Copy the key now: it is not shown again.")
                form = TokenForm()
    else:
        form = TokenForm()
    now = timezone.now()
    tokens = [(token, token.state(now)) for token in api_token_list(user=request.user)]
    response = render(
        request,
        "portal/tokens.html",
        {"form": form, "tokens": tokens, "new_key": new_key, "portal_url": request.build_absolute_uri("/").rstrip("/")},
        status=400 if form.errors else 200,
    )
    response["Cache-Control"] = "no-store"  # the page may carry a new key
    return response


@login_required
@require_POST
def token_revoke(request, pk: int):
    token = ApiToken.objects.filter(pk=pk, user=request.user).first()
    if token is None:
        raise Http404("No such token")
    api_token_revoke(token=token, by=request.user)
    messages.success(request, f"Token {token.name!r} revoked.")
    return redirect("token-list")


def lockout_response(request, original_response=None, credentials=None) -> HttpResponse:
    """django-axes' lockout answer: 429 with Retry-After (the cool-off), on the login page's layout."""
    body = render_to_string("registration/locked_out.html", {"cooloff_s": settings.AXES_COOLOFF_S}, request=request)
    response = HttpResponse(body, status=429)
    response["Retry-After"] = str(settings.AXES_COOLOFF_S)
    return response
