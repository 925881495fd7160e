"""MIG slices: NVIDIA's placement table per GPU, the slot each instance takes, +me profiles, fixed
partitions and profiles the table does not have.

``NVIDIA`` is typed by hand from the NVIDIA MIG user guide ("Supported MIG Profiles" and the
``nvidia-smi mig -lgipp`` placements, ``{starts}:size``), not from the engine's tables. The expected
slots in the scenario tables are worked out by hand from the rule in docs/engine.md: a new instance
takes the free valid start that costs the device the fewest instances of the largest profile, then
of the next largest (7g, 4g, 3g, 2g, 1g with two memory slices, 1g), then the lowest start.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.cycle import run_cycle
from scheduling.engine.mig import mig_geometry
from scheduling.engine.model import Policy

from .builders import apply_plan, cq, job, lq, node, pending_info, snapshot

NOW = 1000.0
ALL_ONES = (0, 1, 2, 3, 4, 5, 6)

# model: (device memory GiB, compute slices, {profile: (compute slices, placements, memory slices, max instances)})
NVIDIA: dict[str, tuple[int, int, dict[str, tuple[int, tuple[int, ...], int, int]]]] = {
    "A30-24GB": (
        24,
        4,
        {
            "1g.6gb": (1, (0, 1, 2, 3), 1, 4),
            "1g.6gb+me": (1, (0, 1, 2, 3), 1, 1),
            "2g.12gb": (2, (0, 2), 2, 2),
            "2g.12gb+me": (2, (0, 2), 2, 1),
            "4g.24gb": (4, (0,), 4, 1),
        },
    ),
    "A100-40GB": (
        40,
        7,
        {
            "1g.5gb": (1, ALL_ONES, 1, 7),
            "1g.5gb+me": (1, ALL_ONES, 1, 1),
            "1g.10gb": (1, (0, 2, 4, 6), 2, 4),
            "2g.10gb": (2, (0, 2, 4), 2, 3),
            "3g.20gb": (3, (0, 4), 4, 2),
            "4g.20gb": (4, (0,), 4, 1),
            "7g.40gb": (7, (0,), 8, 1),
        },
    ),
    "A100-80GB": (
        80,
        7,
        {
            "1g.10gb": (1, ALL_ONES, 1, 7),
            "1g.10gb+me": (1, ALL_ONES, 1, 1),
            "1g.20gb": (1, (0, 2, 4, 6), 2, 4),
            "2g.20gb": (2, (0, 2, 4), 2, 3),
            "3g.40gb": (3, (0, 4), 4, 2),
            "4g.40gb": (4, (0,), 4, 1),
            "7g.80gb": (7, (0,), 8, 1),
        },
    ),
    "H100-94GB": (
        94,
        7,
        {
            "1g.12gb": (1, ALL_ONES, 1, 7),
            "1g.12gb+me": (1, ALL_ONES, 1, 1),
            "1g.24gb": (1, (0, 2, 4, 6), 2, 4),
            "2g.24gb": (2, (0, 2, 4), 2, 3),
            "3g.47gb": (3, (0, 4), 4, 2),
            "4g.47gb": (4, (0,), 4, 1),
            "7g.94gb": (7, (0,), 8, 1),
        },
    ),
    "H100-96GB": (
        96,
        7,
        {
            "1g.12gb": (1, ALL_ONES, 1, 7),
            "1g.12gb+me": (1, ALL_ONES, 1, 1),
            "1g.24gb": (1, (0, 2, 4, 6), 2, 4),
            "2g.24gb": (2, (0, 2, 4), 2, 3),
            "3g.48gb": (3, (0, 4), 4, 2),
            "4g.48gb": (4, (0,), 4, 1),
            "7g.96gb": (7, (0,), 8, 1),
        },
    ),
    "H200-141GB": (
        141,
        7,
        {
            "1g.18gb": (1, ALL_ONES, 1, 7),
            "1g.18gb+me": (1, ALL_ONES, 1, 1),
            "1g.35gb": (1, (0, 2, 4, 6), 2, 4),
            "2g.35gb": (2, (0, 2, 4), 2, 3),
            "3g.71gb": (3, (0, 4), 4, 2),
            "4g.71gb": (4, (0,), 4, 1),
            "7g.141gb": (7, (0,), 8, 1),
        },
    ),
}
NVIDIA["H100-80GB"] = NVIDIA["A100-80GB"]
MODELS = tuple(NVIDIA)


def cycle(nodes, jobs, **kwargs):
    queues = ([cq("q", dict.fromkeys(MODELS, 1000))], [lq("a", "q")])
    snap = snapshot(nodes, *queues, jobs, **kwargs)
    return snap, run_cycle(snap, Policy(), NOW)


def slots_of(plan, ids):
    by_id = {a.workload_id: a for a in plan.admissions}
    return [by_id[i].placements[0].mig_slot if i in by_id else None for i in ids]


@pytest.mark.parametrize("model", MODELS)
def test_every_profile_of_nvidias_table_has_its_placements_and_size(model):
    memory, compute_slices, profiles = NVIDIA[model]
    for profile, (compute, starts, size, _) in profiles.items():
        geometry = mig_geometry(profile, memory)
        assert geometry is not None, profile
        assert (geometry.compute, geometry.starts, geometry.memory_slices) == (compute, starts, size)
        assert geometry.device_compute == compute_slices


@pytest.mark.parametrize("model", MODELS)
def test_one_empty_gpu_holds_as_many_instances_of_each_profile_as_nvidia_says(model):
    memory, _, profiles = NVIDIA[model]
    for profile, (_, _, _, instances) in profiles.items():
        ids = [f"j{i}" for i in range(instances + 1)]
        jobs = [job(i, "a", mig=profile, created=k, cpu=0, mem=0) for k, i in enumerate(ids)]
        _, plan = cycle([node("m", model, 1, mig=True, gpu_memory_gib=memory)], jobs)
        assert sum(s is not None for s in slots_of(plan, ids)) == instances, profile


@pytest.mark.parametrize(
    ("model", "profile"),
    [
        ("A100-80GB", "3g.20gb"),  # an A100-40GB profile
        ("A100-80GB", "5g.50gb"),  # no GPU has it
        ("A100-40GB", "1g.10gb+me"),  # +me exists only on the smallest 1g
        ("H100-94GB", "3g.48gb"),  # the 96 GB part's name
        ("A30-24GB", "3g.12gb"),
    ],
)
def test_a_profile_not_in_the_gpus_table_never_fits_and_gets_no_start_estimate(model, profile):
    memory = NVIDIA[model][0]
    _, plan = cycle([node("m", model, 1, mig=True, gpu_memory_gib=memory)], [job("j", "a", mig=profile)])
    info = pending_info(plan, "j")
    assert not info.reason.waits
    assert profile in info.reason.message
    assert info.estimated_start is None


# (model, profiles in arrival order, hand-derived start slices; None = refused)
SCENARIOS = [
    # The cases: the 4g.40gb (start 0 only) still fits after these.
    ("A100-80GB", ["3g.40gb", "4g.40gb"], [4, 0]),
    ("H100-80GB", ["3g.40gb", "4g.40gb"], [4, 0]),
    ("A100-80GB", ["1g.10gb", "2g.20gb", "4g.40gb"], [6, 4, 0]),
    ("H100-80GB", ["1g.10gb", "1g.10gb", "1g.10gb", "4g.40gb"], [6, 4, 5, 0]),
    ("A100-80GB", ["1g.10gb"] * 4 + ["4g.40gb"], [6, 4, 5, 0, None]),  # 4 + 4 compute slices > 7
    ("A100-80GB", ["4g.40gb", "3g.40gb", "1g.10gb"], [0, 4, None]),
    ("A100-80GB", ["1g.20gb", "3g.40gb", "1g.20gb"], [6, 0, 4]),
    ("A100-40GB", ["3g.20gb", "4g.20gb"], [4, 0]),
    ("A100-40GB", ["1g.5gb", "2g.10gb", "4g.20gb"], [6, 4, 0]),
    ("H100-94GB", ["3g.47gb", "4g.47gb"], [4, 0]),
    ("H100-96GB", ["2g.24gb", "4g.48gb", "1g.12gb"], [4, 0, 6]),
    ("H200-141GB", ["3g.71gb", "4g.71gb"], [4, 0]),
    ("A30-24GB", ["1g.6gb", "2g.12gb", "1g.6gb"], [0, 2, 1]),
    ("A30-24GB", ["2g.12gb", "4g.24gb"], [0, None]),
    # +me: a profile of its own, one per GPU.
    ("A100-80GB", ["1g.10gb+me", "1g.10gb+me", "1g.10gb"], [6, None, 4]),
    ("A30-24GB", ["2g.12gb+me", "1g.6gb+me"], [0, None]),
]


@pytest.mark.parametrize(("model", "profiles", "slots"), SCENARIOS)
def test_slots_leave_room_for_the_largest_profiles_in_one_cycle(model, profiles, slots):
    memory = NVIDIA[model][0]
    ids = [f"j{i}" for i in range(len(profiles))]
    jobs = [job(i, "a", mig=p, created=k, cpu=0, mem=0) for k, (i, p) in enumerate(zip(ids, profiles, strict=True))]
    _, plan = cycle([node("m", model, 1, mig=True, gpu_memory_gib=memory)], jobs)
    assert slots_of(plan, ids) == slots


@pytest.mark.parametrize(("model", "profiles", "slots"), SCENARIOS)
def test_slots_leave_room_for_the_largest_profiles_across_cycles(model, profiles, slots):
    nodes = [node("m", model, 1, mig=True, gpu_memory_gib=NVIDIA[model][0])]
    running: tuple = ()
    got = []
    for k, profile in enumerate(profiles):
        snap, plan = cycle(nodes, (*running, job(f"j{k}", "a", mig=profile, created=k, cpu=0, mem=0)))
        got.extend(slots_of(plan, [f"j{k}"]))
        running = tuple(w for w in apply_plan(snap, plan, NOW).workloads if w.placements)
    assert got == slots


def test_a_new_instance_costs_a_4g_on_a_busy_gpu_before_a_7g_on_an_empty_one():
    # GPU 0 holds a 3g.40gb at 4: any 1g.10gb there (slices 0-3) costs it its 4g.40gb; on GPU 1 it
    # costs the 7g.80gb, the larger loss. Slices 0-3 of GPU 0 tie; the lowest start wins.
    nodes = [node("m", "A100-80GB", 2, mig=True)]
    snap, plan = cycle(nodes, [job("big", "a", mig="3g.40gb", cpu=0, mem=0)])
    assert slots_of(plan, ["big"]) == [4]
    snap = apply_plan(snap, plan, NOW)
    _, plan = cycle(nodes, (*snap.workloads, job("small", "a", mig="1g.10gb", created=1, cpu=0, mem=0)))
    (p,) = next(a for a in plan.admissions if a.workload_id == "small").placements
    assert (p.gpu_indices, p.mig_slot) == ((0,), 0)


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    picks=st.lists(st.integers(0, 6), min_size=1, max_size=12),
)
def test_every_admitted_layout_is_one_nvidia_allows(model, picks):
    """No overlapping memory slices, only the table's starts, at most the device's compute slices and
    at most one +me instance per GPU, for any arrival order of the GPU's profiles."""
    memory, compute_slices, profiles = NVIDIA[model]
    names = sorted(profiles)
    requests = [names[p % len(names)] for p in picks]
    ids = [f"j{i}" for i in range(len(requests))]
    jobs = [job(i, "a", mig=r, created=k, cpu=0, mem=0) for k, (i, r) in enumerate(zip(ids, requests, strict=True))]
    _, plan = cycle([node("m", model, 2, mig=True, gpu_memory_gib=memory)], jobs)
    used: dict[int, list[tuple[str, int]]] = {}
    for a in plan.admissions:
        (p,) = a.placements
        assert p.mig_slot in profiles[p.mig_profile][1]
        used.setdefault(p.gpu_indices[0], []).append((p.mig_profile, p.mig_slot))
    for instances in used.values():
        slices: list[int] = []
        for profile, start in instances:
            slices.extend(range(start, start + profiles[profile][2]))
        assert len(slices) == len(set(slices))
        assert sum(profiles[p][0] for p, _ in instances) <= compute_slices
        assert sum(p.endswith("+me") for p, _ in instances) <= 1


def fixed(name: str, gpus: int, slices: dict[str, int]):
    """A node whose device plugin (mixed strategy) advertises these slices."""
    return replace(node(name, "A100-80GB", gpus, mig=True), mig_slices=tuple(sorted(slices.items())))


@pytest.mark.parametrize(
    ("slices", "gpus", "profiles", "admitted"),
    [
        # Two 3g.40gb on one GPU: a 4g.40gb or a 1g.10gb has no slice, the third 3g.40gb waits.
        ({"3g.40gb": 2}, 1, ["3g.40gb", "3g.40gb", "3g.40gb"], [True, True, False]),
        ({"3g.40gb": 2}, 1, ["1g.10gb"], [False]),
        # 4g.40gb + 3g.40gb on one GPU, 7 x 1g.10gb on another: each profile up to its count.
        ({"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 7}, 2, ["1g.10gb"] * 8, [True] * 7 + [False]),
        ({"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 7}, 2, ["4g.40gb", "3g.40gb", "4g.40gb"], [True, True, False]),
    ],
)
def test_fixed_partitions_take_only_slices_that_exist(slices, gpus, profiles, admitted):
    ids = [f"j{i}" for i in range(len(profiles))]
    jobs = [job(i, "a", mig=p, created=k, cpu=0, mem=0) for k, (i, p) in enumerate(zip(ids, profiles, strict=True))]
    _, plan = cycle([fixed("m", gpus, slices)], jobs)
    assert [s is not None for s in slots_of(plan, ids)] == admitted


def test_a_profile_no_fixed_partition_offers_never_fits():
    _, plan = cycle([fixed("m", 1, {"3g.40gb": 2})], [job("j", "a", mig="4g.40gb")])
    info = pending_info(plan, "j")
    assert not info.reason.waits
    assert "MIG profile not supported" in info.reason.message


def test_fixed_slices_in_use_are_counted_across_cycles():
    nodes = [fixed("m", 1, {"1g.10gb": 7})]
    running: tuple = ()
    admitted = 0
    for k in range(9):
        snap, plan = cycle(nodes, (*running, job(f"j{k}", "a", mig="1g.10gb", created=k, cpu=0, mem=0)))
        admitted += bool(plan.admissions)
        running = tuple(w for w in apply_plan(snap, plan, NOW).workloads if w.placements)
    assert admitted == 7
