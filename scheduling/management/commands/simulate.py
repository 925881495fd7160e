"""``manage.py simulate``: thin wrapper around :func:`scheduling.sim.cli.main` (same arguments)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from scheduling.sim.cli import build_parser, main


class Command(BaseCommand):
    help = build_parser().description or "Trace simulator"

    def run_from_argv(self, argv: list[str]) -> None:
        # argv = [prog, "simulate", *args]; the simulator owns its argument parsing.
        code = main(argv[2:])
        if code:
            raise SystemExit(code)

    def handle(self, *args: Any, **options: Any) -> None:  # call_command("simulate", "--out", ...)
        code = main(list(args))
        if code:
            raise CommandError(f"simulate exited with {code}")
