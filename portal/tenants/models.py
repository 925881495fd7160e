"""Tenants: a team is a Kubernetes namespace with members. Platform admins are Django staff."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

dns_label_validator = RegexValidator(
    regex=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    message="must be a DNS label: at most 63 lowercase letters, digits or '-', "
    "starting and ending with a letter or digit",
)


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=63, unique=True)
    namespace = models.CharField(
        max_length=63,
        unique=True,
        validators=[dns_label_validator],
        help_text="Kubernetes namespace the team's pods run in.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        TEAM_ADMIN = "team-admin", "Team admin"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="uniq_membership")]
        ordering = ["team__name", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class TeamHold(models.Model):
    """A team may not start new jobs while it has a hold (running jobs are left alone).

    Holds are data, written by whoever decides them (billing's budget check writes ``source="budget"``)
    and read by the scheduling cycle, so the scheduler needs no knowledge of why a team is held.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="holds")
    source = models.CharField(max_length=40, help_text="Who set the hold, e.g. 'budget'.")
    reason = models.CharField(max_length=500, blank=True)
    since = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "source"], name="uniq_team_hold_source")]
        ordering = ["team__slug", "source"]

    def __str__(self) -> str:
        return f"{self.team} held by {self.source}"


class TolerationGrant(models.Model):
    """A taint a team's jobs may tolerate. Platform admins keep this allow-list in the admin; a job
    whose toleration no grant covers is refused at submission (400 naming the toleration).

    The portal binds pods itself, so a toleration is a key to a node: without this list a tenant
    could land on nodes dedicated to another team or on the control plane."""

    class Effect(models.TextChoices):
        ANY = "", "any effect"
        NO_SCHEDULE = "NoSchedule"
        PREFER_NO_SCHEDULE = "PreferNoSchedule"
        NO_EXECUTE = "NoExecute"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="toleration_grants")
    all_taints = models.BooleanField(
        default=False, help_text="Every taint, including an empty-key Exists toleration (e.g. a platform team)."
    )
    key = models.CharField(
        max_length=316, blank=True, help_text="Taint key, e.g. karpenter.sh/capacity-type or nvidia.com/gpu."
    )
    value = models.CharField(max_length=63, blank=True, help_text="Empty = any value.")
    effect = models.CharField(max_length=20, choices=Effect.choices, blank=True, default=Effect.ANY)
    note = models.CharField(max_length=200, blank=True, help_text="Why the team may tolerate it.")

    class Meta:
        ordering = ["team__slug", "key", "value", "effect"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(all_taints=True) | ~models.Q(key=""), name="toleration_grant_names_a_key"
            ),
        ]

    def __str__(self) -> str:
        if self.all_taints:
            return f"{self.team}: every taint"
        return f"{self.team}: {self.key}={self.value or '*'}:{self.effect or '*'}"

    def as_data(self) -> dict[str, object]:
        return {"key": self.key, "value": self.value, "effect": self.effect, "all": self.all_taints}
