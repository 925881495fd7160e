"""``JobCreateSerializer`` copies its declared fields once per class (``FieldsOnce``), not per
instance as DRF does: for any body, valid or not, one after another on the same process, it answers
as DRF's own per-instance deep copy does (the same errors, the same validated values)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rest_framework import serializers

from portal.api.job_create import JobCreateSerializer

pytestmark = pytest.mark.django_db


class DeepCopied(JobCreateSerializer):
    """The reference: DRF's ``get_fields`` (a deep copy of the declared fields per instance)."""

    def get_fields(self):
        return serializers.Serializer.get_fields(self)


_ANY = st.one_of(
    st.none(), st.integers(-5, 10), st.text(max_size=5), st.booleans(), st.lists(st.integers(), max_size=2)
)
_TOLERATION = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(["spot", "bad key!", "", 7]),
        "operator": st.sampled_from(["Equal", "Exists", "Nope"]),
        "value": st.sampled_from(["", "x", "v" * 70]),
        "effect": st.sampled_from(["", "NoSchedule", "Bogus"]),
        "extra": st.just(1),
    },
)
_BODY = st.fixed_dictionaries(
    {},
    optional={
        "queue": st.sampled_from(["default", "vision/default", "nlp/default", "nope", "q" * 200]),
        "image": st.sampled_from(["busybox", "", " x ", None]),
        "gpu": st.one_of(st.integers(-1, 20), _ANY),
        "gpu_milli": st.sampled_from([0, 500, 1000]),
        "replicas": st.integers(0, 3),
        "command": st.one_of(st.sampled_from(["python 'unclosed", "echo hi", ["a", 1]]), st.lists(st.text(max_size=3))),
        "labels": st.one_of(st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3), _ANY),
        "node_selector": st.one_of(st.dictionaries(st.sampled_from(["a", "b" * 400]), st.just("x")), _ANY),
        "tolerations": st.one_of(st.lists(_TOLERATION, max_size=3), _ANY),
        "allowed_gpu_models": st.one_of(st.lists(st.sampled_from(["T4", "A100-80GB", "H9"]), max_size=2), _ANY),
        "priority_class": st.sampled_from(["low", "critical", "nope"]),
        "start_after": st.sampled_from(["2031-01-01T00:00:00+02:00", "yesterday", None]),
        "spot": _ANY,
        "unknown_field": _ANY,
        "privileged": st.just(True),
    },
)


VALID = {"queue": "vision/default", "image": "busybox", "gpu": 1, "allowed_gpu_models": ["T4", "A100-80GB"]}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(_BODY, min_size=1, max_size=3), user=st.sampled_from(["alice", "carol"]))
@example(bodies=[VALID, {**VALID, "tolerations": [{"key": "spot"}], "labels": {"a": "b"}}, {"gpu": "x"}], user="alice")
@example(bodies=[{**VALID, "queue": "nlp/default", "command": "python train.py", "gpu": 0}, VALID], user="carol")
def test_fields_copied_once_validate_as_drfs_deep_copy_does(world, bodies, user):
    context = {"request": SimpleNamespace(user=world.users[user])}
    for body in bodies:
        once = JobCreateSerializer(data=body, context=context)
        reference = DeepCopied(data=body, context=context)
        assert once.is_valid() == reference.is_valid()
        assert once.errors == reference.errors
        if reference.errors == {}:
            assert once.validated_data == reference.validated_data
            assert once.to_spec() == reference.to_spec()
