"""Read-side queries about who may see what."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.tenants.models import Membership, Team, TeamHold


def team_list_for_user(*, user) -> QuerySet[Team]:
    """Teams a user may see: all for platform admins (staff), otherwise the teams they belong to."""
    if user.is_staff:
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user).distinct()


def user_is_team_admin(*, user, team: Team) -> bool:
    if user.is_staff:
        return True
    return Membership.objects.filter(user=user, team=team, role=Membership.Role.TEAM_ADMIN).exists()


def team_holds() -> tuple[tuple[str, str], ...]:
    """``(team slug, why)`` for every team that may not start new jobs, sorted by slug.

    A team held by several sources gets one entry whose reason joins theirs.
    """
    reasons: dict[str, list[str]] = {}
    for slug, reason in TeamHold.objects.order_by("team__slug", "source").values_list("team__slug", "reason"):
        reasons.setdefault(slug, []).append(reason)
    return tuple((slug, "; ".join(r for r in why if r)) for slug, why in reasons.items())
