"""The graded outcome of one pending job in a cycle (step 3 of ``cycle``): fit, preempt, no fit, deferred.

Exactly one per decision, each carrying only what it needs: the cycle records a ``Fit`` as an
admission, a ``Preempt`` as preemptions plus a ``preempting`` reason, a ``NoFit`` as a pending reason,
and takes a ``Deferred`` job again in the borrowing pass. ``NoFit`` and ``Deferred`` are remembered for
jobs of the same shape in the same queue (they would get the same outcome).

``Misses`` collects why each GPU model of one job did not admit it (what steps 3d and 3e of ``cycle``
read); ``Memo`` is what a cycle learns once and reuses.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .explain import invalid_reason
from .fit import Shape
from .model import Admission, Reason, ReasonKind
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


@dataclass(slots=True)
class Misses:
    """Why each GPU model of one job did not admit it (step 3c), for steps 3d and 3e."""

    invalid: list[str] = field(default_factory=list)  # the request cannot exist on a model
    deferrable: bool = False  # some model would need to borrow (first pass only)
    tried: list[tuple[Shape, dict[str, int]]] = field(default_factory=list)  # shape, minimum request
    quota: list[Reason] = field(default_factory=list)
    fitting: list[Shape] = field(default_factory=list)  # shapes that had quota
    placement: Reason | None = None  # the first placement (gang) reason
    protected: tuple[list[str], float] | None = None  # victims within their minimum runtime, and until

    def reason(self, failure: Reason | None) -> Reason:
        """The placement (or gang) ``failure`` of the first model that had quota, with the models the
        request cannot exist on; else the quota reason (of every model tried)."""
        if failure is not None:
            if self.invalid:
                failure = replace(failure, message=f"{failure.message} ({'; '.join(self.invalid)})")
            return failure
        if self.quota:
            if len(self.quota) == 1:
                return self.quota[0]
            message = "; ".join(r.message.removeprefix("quota: ") for r in self.quota)
            return Reason(ReasonKind.QUOTA, "quota: " + message, self.quota[0].details)
        return invalid_reason("; ".join(self.invalid))  # unreachable: step 2 set such jobs aside


@dataclass(slots=True)
class Memo:
    """What the cycle learns once and reuses (capacity and quota only shrink during a cycle)."""

    failed: dict[tuple[object, ...], NoFit | Deferred] = field(default_factory=dict)  # by job signature
    # Placement failures hold for every later job of the same shape and filters, whatever its queue
    # (value: a gang reason, or None = explain later).
    placement_failed: dict[tuple[object, ...], Reason | None] = field(default_factory=dict)
    explained: dict[tuple[object, ...], Reason] = field(default_factory=dict)
    preemption_failed: set[tuple[object, ...]] = field(default_factory=set)
    requests: dict[tuple[Shape, int], dict[str, int]] = field(default_factory=dict)
    # Per queue and request signature: the minimum request of each GPU model the job may use.
    minimums: dict[tuple[object, ...], tuple[dict[str, int], ...]] = field(default_factory=dict)


NOT_EXPLAINED = NoFit(Reason(ReasonKind.PLACEMENT, "does not fit (forecast)"))
