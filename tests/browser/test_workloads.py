"""Training jobs and the capacity signal in a real browser: the form submits a training gang, its
page shows each worker's rendezvous variables, and the Queues page the nodes that would start it."""

from __future__ import annotations

import pytest
from django.utils import timezone

from portal.jobs.models import Job
from scheduling.adapters.simulated import SimulatedCluster
from scheduling.services import cycle_run
from tests.browser.conftest import assert_nothing_overflows, login, screenshot


@pytest.mark.django_db(transaction=True)
def test_a_training_gang_from_the_form_shows_its_workers_and_the_capacity_it_waits_for(page, world, tmp_path, settings):
    settings.QUEUE_NEVER_FITTING_JOBS = True  # 3 x 8 GPUs: more than today's two A100 nodes
    world.cluster_queues["vision"].flavors.filter(gpu_model=world.models["A100-80GB"]).update(nominal_gpus=64)
    login(page, "alice")
    page.goto("/jobs/new/")
    page.fill("input[name=name]", "llm")
    page.select_option("select[name=kind]", "training")
    page.fill("input[name=replicas]", "3")
    page.fill("input[name=gpu]", "8")
    page.fill("input[name=checkpoint_path]", "s3://ckpt/llm")
    page.check("input[name=allowed_gpu_models][value='A100-80GB']")
    page.click("form.job button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "/jobs/new/" not in page.url, page.locator(".errorlist").all_inner_texts()
    job = Job.objects.get(name="llm")
    assert (job.kind, job.replicas, job.checkpoint_path) == ("training", 3, "s3://ckpt/llm")
    cycle_run(now=timezone.now(), backend=SimulatedCluster())

    page.goto(f"/jobs/{job.pk}/")
    rows = page.locator("#training-env tbody tr")
    assert rows.count() == 3
    # Worker 2 of 3 with 8 GPUs each: node rank 2, global rank 16, 24 processes in all.
    assert rows.nth(2).locator("td").all_inner_texts()[:6] == ["2", "2", "16", "8", "3", "24"]
    assert f"job-{job.pk}-r0.job-{job.pk}.team-vision.svc:29500" in rows.nth(0).inner_text()
    assert "s3://ckpt/llm" in page.content()
    assert "3 more A100-80GB nodes" in page.content()  # its pending reason
    screenshot(page, "training-job", tmp_path)

    page.goto("/queues/")
    row = page.locator("#capacity-wanted tbody tr").first
    assert row.locator("td").all_inner_texts() == ["(no pool)", "A100-80GB", "1", "3", "3 nodes"]
    assert_nothing_overflows(page)
    screenshot(page, "queues-capacity", tmp_path)
