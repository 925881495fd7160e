"""``python manage.py dump_snapshot FILE.json``: write the live state in the snapshot format.

The file holds the snapshot, the configured policy and ``now``, so ``schedule_snapshot FILE.json``
reproduces the decision the next cycle would take.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand
from django.utils import timezone

from scheduling.adapters import orm
from scheduling.adapters.factory import cluster_backend
from scheduling.engine.codec import policy_to_json, snapshot_to_json
from scheduling.services import policy_from_settings, teams_blocked


class Command(BaseCommand):
    help = "Write the live cluster and queue state as a snapshot JSON file ('-' for standard output)."

    def add_arguments(self, parser):
        parser.add_argument("file", help="output path, or - for standard output")

    def handle(self, *args, file: str, **options):
        snapshot = orm.snapshot_load(backend=cluster_backend(), teams_blocked=teams_blocked())
        data = snapshot_to_json(snapshot)
        data["policy"] = policy_to_json(policy_from_settings())
        data["now"] = timezone.now().timestamp()
        text = json.dumps(data, indent=2, sort_keys=True)
        if file == "-":
            self.stdout.write(text)
            return
        Path(file).write_text(text + "\n")
        self.stderr.write(
            f"wrote {file}: {len(snapshot.nodes)} nodes, {len(snapshot.workloads)} jobs, "
            f"{len(snapshot.cluster_queues)} cluster queues"
        )
