"""``python manage.py schedule_snapshot FILE.json``: run one cycle on a snapshot file, print the plan.

The file is the format of ``docs/snapshot-format.md`` (what ``dump_snapshot`` writes); it may carry a
``policy`` object and ``now`` (POSIX seconds). Command-line options override both. The logic is in
:func:`schedule_file` so it can be used and tested without Django.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.engine.codec import (
    SnapshotFormatError,
    cycle_input_from_json,
    plan_to_json,
    policy_from_json,
    policy_to_json,
)
from scheduling.engine.cycle import run_cycle
from scheduling.engine.model import Policy


def schedule_file(
    path: str | Path,
    *,
    now: float | None = None,
    placement: str | None = None,
    seed: int | None = None,
    policy_overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one cycle on the snapshot in ``path`` and return the plan as a JSON-ready dict.

    ``now`` defaults to the file's ``now``, else 0 (estimated starts are then relative to 0).
    Raises ``ValueError`` (``SnapshotFormatError``) for a malformed file.
    """
    data = json.loads(Path(path).read_text())
    snapshot, policy, file_now = cycle_input_from_json(data)
    base = policy if policy is not None else Policy()
    overrides: dict[str, Any] = dict(policy_overrides or {})
    if placement is not None:
        overrides["placement"] = placement
    if seed is not None:
        overrides["seed"] = seed
    if overrides:
        merged = {**policy_to_json(base), **overrides}
        base = policy_from_json(merged)
    when = now if now is not None else (file_now if file_now is not None else 0.0)
    plan = run_cycle(snapshot, base, when)
    out = plan_to_json(plan)
    out["now"] = when
    return out


class Command(BaseCommand):
    help = "Run one scheduling cycle on a snapshot file and print the plan as JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="snapshot JSON (see docs/snapshot-format.md)")
        parser.add_argument("--now", type=float, default=None, help="cycle time, POSIX seconds")
        parser.add_argument("--placement", default=None, help="placement policy, e.g. binpack, fgd")
        parser.add_argument("--seed", type=int, default=None, help="seed for randomised scorers")
        parser.add_argument("--indent", type=int, default=2)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            out = schedule_file(
                options["file"], now=options["now"], placement=options["placement"], seed=options["seed"]
            )
        except FileNotFoundError as exc:
            raise CommandError(f"no such file: {options['file']}") from exc
        except (SnapshotFormatError, json.JSONDecodeError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(out, indent=options["indent"] or None, sort_keys=False))
