"""``INFERENCE_PREEMPTS_TRAINING``: the setting reaches the cycle's policy, and with it an inference replica
takes the nodes of another team's lower-priority training job (off: it waits)."""

import pytest
from django.utils import timezone

from portal.jobs.models import FlavorQuota, Job
from portal.jobs.states import JobState
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("rule", "replica_state", "training_state"), [(False, "Pending", "Running"), (True, "Pending", "Pending")]
)
def test_an_inference_replica_preempts_another_teams_lower_priority_training_only_when_configured(
    world, settings, rule, replica_state, training_state
):
    settings.INFERENCE_PREEMPTS_TRAINING = rule
    # team nlp holds both A100 nodes within its own nominal quota (nothing borrowed: no reclaim)
    FlavorQuota.objects.filter(cluster_queue=world.cluster_queues["nlp"], gpu_model__name="A100-80GB").update(
        nominal_gpus=16
    )
    training = world.submit("nlp", kind="training", replicas=2, gpu=8, priority_class=world.priorities["low"])
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    replica = world.submit("vision", kind="inference", gpu=4, allowed_gpu_models=(world.models["A100-80GB"],))
    cycle_run(now=timezone.now(), backend=SimulatedCluster())
    training.refresh_from_db()
    replica.refresh_from_db()
    assert (replica.state, training.state) == (replica_state, training_state)
    if rule:
        assert training.transitions.filter(to_state=JobState.PREEMPTED, reason__startswith="serving: ").exists()
        cycle_run(now=timezone.now(), backend=SimulatedCluster())
        assert Job.objects.get(pk=replica.pk).state == JobState.ADMITTED
    else:
        assert "placement" in str(replica.pending_reason.get("kind"))
