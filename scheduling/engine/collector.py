"""CPython's cyclic garbage collector around a scheduling cycle (``cycle.run_cycle``, the dry run's)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """CPython's cyclic garbage collector paused for the block (as it was before, after it).

    A cycle allocates hundreds of thousands of objects, most of them freed at once by reference
    counting; the collector still counts them and sets off collections of its oldest generation, which
    traverse every live object of the process (the snapshot's tens of thousands, the worker's own) a
    few times per cycle: on ``bench/bench_cycle.py`` 0.3 s of a ``portal`` cycle and 0.5 s of a
    ``binpack`` one. Nothing the cycle decides depends on when garbage is collected. Whatever reference
    cycles the block leaves are collected after it, by the collector's next run. Two threads running
    cycles at once leave it enabled when the last one ends (the first saw it enabled; the second saw it
    disabled and leaves it to the first).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
