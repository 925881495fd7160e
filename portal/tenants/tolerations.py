"""Which tolerations a team may carry: a job's toleration against its team's allow-list.

Pure (plain mappings in, a verdict out), so the scheduling engine can apply the same rule to the
allow-list in its snapshot. A grant is a mapping with ``key``, ``value``, ``effect`` and ``all``:

- ``all``: any toleration, including the empty-key ``Exists`` that tolerates every taint;
- otherwise the toleration's key must be the grant's key (an empty-key toleration needs ``all``);
- a grant's empty value allows any value (``Exists``, or ``Equal`` to anything); otherwise the
  toleration must be ``Equal`` to that value;
- a grant's empty effect allows any effect; otherwise the toleration's effect must be that effect
  (a toleration with no effect tolerates every effect, so it needs a grant for any effect).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def toleration_allowed(toleration: Mapping[str, str], grants: Iterable[Mapping[str, object]]) -> bool:
    key = toleration.get("key", "")
    operator = toleration.get("operator", "Equal") or "Equal"
    value = toleration.get("value", "")
    effect = toleration.get("effect", "")
    for grant in grants:
        if grant.get("all"):
            return True
        if not key or key != grant.get("key"):
            continue
        if grant.get("value") and (operator != "Equal" or value != grant.get("value")):
            continue
        if grant.get("effect") and effect != grant.get("effect"):
            continue
        return True
    return False


def toleration_text(toleration: Mapping[str, str]) -> str:
    """A toleration as people write it: ``key=value:Effect`` or ``key:Exists``; ``*`` for every key."""
    key = toleration.get("key", "") or "*"
    operator = toleration.get("operator", "Equal") or "Equal"
    text = f"{key}={toleration.get('value', '')}" if operator == "Equal" else f"{key} Exists"
    effect = toleration.get("effect", "")
    return f"{text}:{effect}" if effect else f"{text} (any effect)"
