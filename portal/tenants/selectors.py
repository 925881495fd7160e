"""Read-side queries about who may see what."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection
from django.db.models import QuerySet

from portal.tenants.models import Membership, Team, TeamHold, TolerationGrant


def team_list_for_user(*, user) -> QuerySet[Team]:
    """Teams a user may see: all for platform admins (staff), otherwise the teams they belong to."""
    if user.is_staff:
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user).distinct()


def team_ids_for_user(*, user) -> list[int] | None:
    """The ids of the teams a user may see (``team_list_for_user``'s), or None for a platform admin:
    every team. Read on every API request about jobs, so its SQL is written once rather than built
    and compiled by the ORM each time."""
    if user.is_staff:
        return None
    with connection.cursor() as cursor:
        cursor.execute(_TEAM_IDS_SQL, [user.pk])
        return [team_id for (team_id,) in cursor.fetchall()]


_TEAM_IDS_SQL = f"SELECT DISTINCT team_id FROM {Membership._meta.db_table} WHERE user_id = %s"


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


def team_toleration_allowlist(*, team_slugs: Iterable[str] | None = None) -> dict[str, tuple[dict[str, object], ...]]:
    """The taints each team may tolerate, as plain data: ``{slug: ({"key", "value", "effect", "all"}, ...)}``.

    Every team asked for (all teams when ``team_slugs`` is None) has an entry, empty when it may
    tolerate nothing. ``portal.tenants.tolerations.toleration_allowed`` applies it; the engine reads
    the same data from its snapshot."""
    teams = Team.objects.all() if team_slugs is None else Team.objects.filter(slug__in=list(team_slugs))
    allow: dict[str, list[dict[str, object]]] = {slug: [] for slug in teams.values_list("slug", flat=True)}
    grants = TolerationGrant.objects.filter(team__slug__in=list(allow)).select_related("team")
    for grant in grants.order_by("team__slug", "key", "value", "effect", "id"):
        allow[grant.team.slug].append(grant.as_data())
    return {slug: tuple(rows) for slug, rows in sorted(allow.items())}
