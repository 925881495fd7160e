"""Which tolerations a team may carry: a job's toleration (as the API gives it) against its team's
allow-list (as ``selectors.team_toleration_allowlist`` gives it).

The rule itself is the engine's (``scheduling.engine.taints.toleration_allowed``): the submit path
refuses what it refuses, and the scheduling cycle, which reads the same grants from its snapshot,
ignores a toleration it would refuse. This module only converts the plain mappings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduling.engine import taints
from scheduling.engine.model import Toleration, TolerationGrant


def as_toleration(toleration: Mapping[str, str]) -> Toleration:
    return Toleration(
        key=str(toleration.get("key", "") or ""),
        operator=str(toleration.get("operator", "Equal") or "Equal"),
        value=str(toleration.get("value", "") or ""),
        effect=str(toleration.get("effect", "") or ""),
    )


def as_grant(grant: Mapping[str, object]) -> TolerationGrant:
    return TolerationGrant(
        key=str(grant.get("key") or ""),
        value=str(grant.get("value") or ""),
        effect=str(grant.get("effect") or ""),
        all=bool(grant.get("all")),
    )


def toleration_allowed(toleration: Mapping[str, str], grants: Iterable[Mapping[str, object]]) -> bool:
    return taints.toleration_allowed(as_toleration(toleration), [as_grant(g) for g in grants])


def toleration_text(toleration: Mapping[str, str]) -> str:
    """A toleration as people write it: ``key=value:Effect`` or ``key:Exists``; ``*`` for every key."""
    key = toleration.get("key", "") or "*"
    operator = toleration.get("operator", "Equal") or "Equal"
    text = f"{key}={toleration.get('value', '')}" if operator == "Equal" else f"{key} Exists"
    effect = toleration.get("effect", "")
    return f"{text}:{effect}" if effect else f"{text} (any effect)"
