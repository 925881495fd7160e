import math

import pytest

from portal.serving.sizing import model_memory_gib, recommend, stabilize


@pytest.mark.parametrize(("size_b", "gib"), [(7, 13), (13, 26), (70, 140), (8, 16), (34, 68), (405, 810)])
def test_model_sizes_take_the_seeds_figures_or_two_gib_per_billion(size_b, gib):
    assert model_memory_gib(size_b) == gib


@pytest.mark.parametrize(
    ("load", "target", "low", "high", "expected"),
    [
        (0, 10, 1, 5, 1),  # no load: the minimum
        (10, 10, 1, 5, 1),
        (10.5, 10, 1, 5, 2),
        (39, 10, 1, 5, 4),
        (1000, 10, 1, 5, 5),  # capped at the maximum
        (5, 10, 0, 5, 1),
    ],
)
def test_the_recommendation_is_load_over_target_rounded_up_within_bounds(load, target, low, high, expected):
    assert recommend(load=load, target=target, min_replicas=low, max_replicas=high) == expected
    assert expected == max(low, min(high, math.ceil(load / target) if load else 0))


def test_scaling_up_is_immediate():
    assert stabilize(current=2, recommended=5, window=[2, 2, 3]) == 5


def test_scaling_down_takes_the_highest_recommendation_of_the_window():
    assert stabilize(current=5, recommended=1, window=[4, 2]) == 4
    assert stabilize(current=5, recommended=1, window=[1, 1]) == 1
    assert stabilize(current=3, recommended=1, window=[7]) == 3  # never above the current count on the way down
