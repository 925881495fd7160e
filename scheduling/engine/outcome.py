"""The graded outcome of one pending job in a cycle (step 3 of ``cycle``): fit, preempt, no fit, deferred.

Exactly one per decision, each carrying only what it needs: the cycle records a ``Fit`` as an
admission, a ``Preempt`` as preemptions plus a ``preempting`` reason, a ``NoFit`` as a pending reason,
and takes a ``Deferred`` job again in the borrowing pass. ``NoFit`` and ``Deferred`` are remembered for
jobs of the same shape in the same queue (they would get the same outcome).
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Admission, Reason
from .preemption import Victim


@dataclass(frozen=True, slots=True)
class Fit:
    """Admitted: the gang is placed (its ``Statement`` committed); ``request`` is its quota charge."""

    admission: Admission
    request: dict[str, int]


@dataclass(frozen=True, slots=True)
class Preempt:
    """Victims chosen: the job waits (reason ``preempting``) until they are gone."""

    victims: tuple[Victim, ...]


@dataclass(frozen=True, slots=True)
class NoFit:
    """Pending with a reason (quota, placement, gang, budget or invalid)."""

    reason: Reason


@dataclass(frozen=True, slots=True)
class Deferred:
    """Would have to borrow: the job is decided in the borrowing pass."""


Outcome = Fit | Preempt | NoFit | Deferred
