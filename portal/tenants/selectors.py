"""Read-side queries about who may see what."""

from __future__ import annotations

from django.db.models import QuerySet

from portal.tenants.models import Membership, Team


def team_list_for_user(*, user) -> QuerySet[Team]:
    """Teams a user may see: all for platform admins (staff), otherwise the teams they belong to."""
    if user.is_staff:
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user).distinct()


def user_is_team_admin(*, user, team: Team) -> bool:
    if user.is_staff:
        return True
    return Membership.objects.filter(user=user, team=team, role=Membership.Role.TEAM_ADMIN).exists()
