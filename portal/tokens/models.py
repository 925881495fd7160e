"""API tokens: stored as a SHA-256 hash of the key (the key itself is shown once, at creation).

A key is 256 random bits, so a fast hash is enough: nobody can search that space, and a database dump
yields no usable key. Tokens have a name, an optional expiry, the last time they were used, and a
revocation time.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. 'laptop notebook'.")
    prefix = models.CharField(max_length=16, help_text="The key's first characters, to recognise it.")
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the key (hex).")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty = never expires.")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) of {self.user_id}"

    def state(self, now=None) -> str:
        """``active``, ``expired`` or ``revoked``."""
        now = now or timezone.now()
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"
