"""``manage.py audit``: check the portal's invariants on this database and cluster; exit 1 if one breaks."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scheduling.adapters.factory import cluster_backend
from scheduling.invariants import audit_findings


class Command(BaseCommand):
    help = (
        "Check invariants: no device, MIG slice, CPU or memory over-committed; no quota exceeded; no job "
        "placed twice; every job's history legal; no pod without a job or job without its pods. Exits 1 if "
        "any is broken."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--no-cluster", action="store_true", help="Check the database only (quota, history).")
        parser.add_argument(
            "--admitted-grace",
            type=float,
            default=max(60.0, 3 * settings.SCHEDULER_INTERVAL_S),
            help="Seconds an admitted job may still be without its pods (they are being created).",
        )

    def handle(self, *args, **options) -> None:
        backend = None if options["no_cluster"] else cluster_backend()
        findings = audit_findings(backend=backend, admitted_grace_s=options["admitted_grace"])
        for finding in findings:
            self.stdout.write(f"FAIL {finding}")
        where = "database" if backend is None else f"database and {backend.name} cluster"
        if findings:
            raise CommandError(f"audit: {len(findings)} broken invariants in the {where}", returncode=1)
        self.stdout.write(f"audit: clean ({where})")
