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

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any):
        # call_command("simulate", "--out", DIR, ...) goes through Django's parser: let it keep its own
        # options and hand everything else to the simulator as positional ``args``.
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parse_known = parser.parse_known_args

        def parse_args(args=None, namespace=None):
            options, rest = parse_known(args, namespace)
            options.args = rest
            return options

        setattr(parser, "parse_args", parse_args)  # noqa: B010 (replacing a bound method on purpose)
        return parser

    def handle(self, *args: Any, **options: Any) -> None:
        code = main(list(args))
        if code:
            raise CommandError(f"simulate exited with {code}")
