"""Model pressure: how much of the expected GPU demand only some GPU models can serve, per free GPU.

``portal`` ranks nodes by it before anything else (``scorer``): a GPU pod goes to the GPU model whose
free capacity the constrained part of the workload needs the least, so pods that may run anywhere
leave the models that constrained pods (a ``gpu_spec``) can only use.

From the typical pods ``t`` (frequency ``p_t``, request ``r_t = gpu_milli × gpu_count``):

* **demand share** of model ``m``: ``s_m = Σ_t p_t × r_t × cap_m / cap(allowed_t) / Σ_t p_t × r_t`` over
  the constrained typical pods ``t`` that allow ``m`` (a constraint naming several models is split by
  their GPU capacity ``cap``); unconstrained pods count in the total only;
* **pressure** of ``m`` now: ``P_m = s_m × free / free_m`` (``free``: free GPU milli of the whole
  cluster, ``free_m``: of model ``m``'s nodes), the constrained demand per free GPU of ``m`` relative
  to the cluster's; a full model with a demand share has infinite pressure;
* **level**: with ``E = max(0, P_m - PRESSURE_SLACK)``, ``round(PRESSURE_LEVELS × E / (1 + E))``, 0 ..
  ``PRESSURE_LEVELS``: a model whose free GPUs still exceed its expected constrained demand by enough
  (``P_m <= PRESSURE_SLACK``) is level 0 like an unconstrained one, and FGD's score decides there;
  models whose pressures are this close count as equal.
"""

from __future__ import annotations

import numpy as np

from .workload import TypicalArrays

PRESSURE_LEVELS = 100
PRESSURE_SLACK = 0.8  # measured: 0.5 / 0.8 / 1.0 / none on four generated gpuspec traces (docs/simulator.md)


def demand_share(table: TypicalArrays, capacity: np.ndarray) -> np.ndarray:
    """``s_m`` per row of ``table.access`` (models, then the CPU-only row); ``capacity`` is the GPU
    count per row."""
    demand = table.freq * table.milli * table.num
    share = np.zeros(table.access.shape[0])
    total = float(demand.sum())
    if total <= 0 or table.any_access:
        return share
    for j in np.flatnonzero(~table.access.all(axis=0)):
        allowed = np.where(table.access[:, j], capacity, 0.0)
        if allowed.sum() > 0:
            share += demand[j] * allowed / allowed.sum()
    return share / total


def pressure_levels(share: np.ndarray, free: np.ndarray) -> np.ndarray:
    """The level of each row from its demand share and its free GPU milli (see the module docstring)."""
    ratio = np.where(share > 0, 1.0, 0.0)  # a full model with a demand share: the top level
    some = (share > 0) & (free > 0)
    excess = np.maximum(share[some] * float(free.sum()) / free[some] - PRESSURE_SLACK, 0.0)
    ratio[some] = excess / (1.0 + excess)
    return np.round(PRESSURE_LEVELS * ratio)
