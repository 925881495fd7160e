"""``gpuportal``: the portal from a terminal or a script.

    gpuportal check job.yaml                  will it run, when, at what cost (nothing is submitted)
    gpuportal submit job.yaml --wait          submit, then follow it to the end
    gpuportal submit --queue default --image pytorch:2.4 --gpu 1 --runtime 2h -- python train.py
    gpuportal status 42 | wait 42 | cancel 42 | cost 42
    gpuportal jobs --state Pending --team vision
    gpuportal login --url https://gpu.example.com

``--json`` prints the portal's JSON (one object, or an array for ``jobs``) on stdout; messages and the
progress bar go to stderr. Exit codes (``Exit``) are stable for scripts.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable, Sequence
from enum import IntEnum
from pathlib import Path
from typing import IO, Any

from gpuportal._version import __version__
from gpuportal.client import Portal, new_idempotency_key
from gpuportal.config import TOKEN_ENV, URL_ENV, config_path, resolve, write_config
from gpuportal.errors import ConfigError, PortalError, ValidationError, WaitTimeout
from gpuportal.render import check_text, job_cost_text, job_table, job_text
from gpuportal.spec import parse_duration, spec_from
from gpuportal.types import Job


class Exit(IntEnum):
    """What the ``gpuportal`` command exits with."""

    OK = 0  # done; check: runs now; wait: Succeeded
    ERROR = 1  # the portal answered an error (401, 403, 404, 409, 429, 5xx) or could not be reached
    USAGE = 2  # bad flags, an unreadable spec, no URL/token, or the portal refused the spec (400)
    WAITS = 3  # check: the job would wait
    NEVER = 4  # check (or submit): the job can never run as configured
    FAILED = 5  # wait (or submit --wait): the job ended Failed or Cancelled
    TIMEOUT = 6  # wait --timeout: the job had not finished in time (it keeps going)
    INTERRUPTED = 130  # Ctrl-C


VERDICT_EXIT = {"runs_now": Exit.OK, "waits": Exit.WAITS, "never": Exit.NEVER}


def _common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Connection and output flags, accepted before or after the command (``gpuportal status 1 --json``)."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if suppress else {}
    parser.add_argument("--url", help=f"the portal's URL (or {URL_ENV}, or the config file)", **default)
    parser.add_argument("--token", help=f"an API token (or {TOKEN_ENV}, or the config file)", **default)
    parser.add_argument("--config", help="config file (default: ~/.config/gpuportal/config.toml)", **default)
    parser.add_argument("--json", action="store_true", help="print the portal's JSON on stdout", **default)


def _spec_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", help="YAML file with the job's fields ('-' for stdin)")
    group = parser.add_argument_group("job fields (override the file's)")
    group.add_argument("--name")
    group.add_argument("--team", help="team slug (needed if you belong to several)")
    group.add_argument("--queue", help="the team's local queue, e.g. default")
    group.add_argument("--kind", choices=["batch", "training", "inference", "ray"])
    group.add_argument("--image", help="container image")
    group.add_argument("--command", help="command line (split like a shell); or put the argv after --")
    group.add_argument("--replicas", type=int)
    group.add_argument("--min-available", type=int, help="gang size (0 = all replicas together)")
    group.add_argument("--gpu", type=int, help="whole GPUs per replica")
    group.add_argument("--gpu-milli", type=int, help="a share of one GPU, 1-999 thousandths")
    group.add_argument("--mig-profile", help="a MIG slice, e.g. 3g.40gb")
    group.add_argument("--gpu-memory-gib", type=int, help="GPU memory per replica; the portal picks the GPU count")
    group.add_argument("--cpu-milli", type=int)
    group.add_argument("--memory-mib", type=int)
    group.add_argument("--gpu-model", action="append", help="an allowed GPU model (repeat for several)")
    group.add_argument("--priority-class")
    group.add_argument("--runtime", help="expected runtime: 3600, 45m, 2h, 1h30m")
    group.add_argument("--restart-policy", choices=["requeue", "never"])
    group.add_argument("--label", action="append", metavar="KEY=VALUE")
    group.add_argument("--node-selector", action="append", metavar="KEY=VALUE")
    group.add_argument(
        "--spot", action=argparse.BooleanOptionalAction, help="may run on spot nodes (requeued if reclaimed)"
    )
    group.add_argument("--checkpoint-path", help="passed to the pods as CHECKPOINT_PATH; named when requeued")
    group.add_argument("--max-restarts", type=int, help="training: whole-gang restarts before the job fails")
    ray = parser.add_argument_group("Ray jobs (--kind ray; --gpu, --cpu-milli, --memory-mib are the head's)")
    ray.add_argument("--ray-mode", choices=["job", "cluster"], help="a RayJob (default) or a RayCluster")
    ray.add_argument("--entrypoint", help="the RayJob's command, e.g. 'python train.py'")
    ray.add_argument(
        "--worker-group",
        action="append",
        metavar="NAME:REPLICAS:GPU[:CPU_MILLI[:MEMORY_MIB]]",
        help="a worker group (repeat for several), e.g. gpu:4:2 or gpu:4:2:8000:65536",
    )


def _wait_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", help="give up waiting after this long (e.g. 30m): exit 6")
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between polls (default 2)")
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None, help="always draw the bar")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="never draw the bar")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuportal",
        description="The GPU job portal from a terminal: check, submit, follow, cancel and cost jobs.",
        epilog="exit codes: 0 ok/runs now/Succeeded, 1 error, 2 usage or refused spec, 3 would wait, "
        "4 never fits as configured, 5 Failed/Cancelled, 6 wait timed out",
    )
    parser.add_argument("--version", action="version", version=f"gpuportal {__version__}")
    _common(parser, suppress=False)
    commands = parser.add_subparsers(dest="verb", required=True, metavar="COMMAND")  # "command": the job's

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        _common(sub, suppress=True)
        return sub

    _spec_flags(command("check", "dry run: will it run now (exit 0), wait (3) or never (4), and its cost"))
    submit = command("submit", "submit a job (retry-safe: every submit carries an Idempotency-Key)")
    _spec_flags(submit)
    submit.add_argument("--idempotency-key", help="your own key: the same key and spec within 24 h = the same job")
    submit.add_argument("--wait", action="store_true", help="then wait for it like `gpuportal wait`")
    _wait_flags(submit)
    command("status", "a job's state, queue position, estimated start and placement").add_argument("job")
    wait = command("wait", "wait for a job to finish: exit 0 Succeeded, 5 Failed or Cancelled")
    wait.add_argument("job")
    _wait_flags(wait)
    command("cancel", "cancel a job").add_argument("job")
    command("cost", "what a job cost so far (GPU-hours, GPU, CPU and memory)").add_argument("job")
    jobs = command("jobs", "list jobs of your teams, newest first")
    jobs.add_argument("--state", action="append", help="Pending, Running, ... (repeat or comma-separate)")
    jobs.add_argument("--team")
    jobs.add_argument("--queue")
    jobs.add_argument("--kind", choices=["batch", "training", "inference", "ray"])
    jobs.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    jobs.add_argument("--all", action="store_true", help="every matching job (all pages)")
    command("login", f"check a token and save URL and token to the config file (0600); reads {TOKEN_ENV} or asks")
    return parser


class Cli:
    """One invocation: parsed arguments, output streams, and the portal (made on first use)."""

    def __init__(self, args: argparse.Namespace, out: IO[str], err: IO[str]) -> None:
        self.args = args
        self.out = out
        self.err = err
        self._portal: Portal | None = None

    @property
    def portal(self) -> Portal:
        if self._portal is None:
            self._portal = Portal(self.args.url, self.args.token, config=self.args.config)
        return self._portal

    def emit(self, data: Any, text: str) -> None:
        """The portal's JSON with ``--json``, else the human text."""
        if self.args.json:
            json.dump(data, self.out, indent=2, sort_keys=True, default=str)
            self.out.write("\n")
        else:
            self.out.write(text + "\n")

    def spec(self) -> dict[str, Any]:
        flags = {k: v for k, v in vars(self.args).items() if k != "file"}
        return spec_from(self.args.file, flags, getattr(self.args, "argv_command", None))

    # -- commands -------------------------------------------------------------------------------

    def check(self) -> int:
        check = self.portal.check(self.spec())
        self.emit(dict(check.raw), check_text(check))
        return VERDICT_EXIT.get(check.verdict, Exit.ERROR)

    def submit(self) -> int:
        key = self.args.idempotency_key or new_idempotency_key()
        job = self.portal.submit(self.spec(), idempotency_key=key)
        if not self.args.json:
            self.err.write(f"submitted job {job.id} (idempotency key {key})\n")
            if job.check is not None:  # the dry run of the spec just before it was queued
                self.err.write(check_text(job.check) + "\n")
        if self.args.wait:
            return self._wait(job)
        self.emit(dict(job.raw), job_text(job))
        return Exit.OK

    def status(self) -> int:
        job = self.portal.job(self.args.job)
        self.emit(dict(job.raw), job_text(job))
        return Exit.OK

    def wait(self) -> int:
        return self._wait(self.args.job)

    def _wait(self, job: Job | str) -> int:
        timeout_s = parse_duration(self.args.timeout) if self.args.timeout else None
        progress = self.args.progress if self.args.progress is not None else self.err.isatty()
        on_change: Callable[[Job], None] | None = None
        if not progress:
            # No bar (a log, a pipe, CI): one line per change of state or queue position.
            def on_change(seen: Job) -> None:
                self.err.write(f"{job_text(seen).splitlines()[0]}\n")
                self.err.flush()

        try:
            final = self.portal.wait(
                job, progress=progress, timeout_s=timeout_s, poll_s=self.args.poll, on_change=on_change, file=self.err
            )
        except WaitTimeout as exc:
            self.emit(dict(exc.job.raw), job_text(exc.job))
            self.err.write(f"gpuportal: {exc.detail}\n")
            return Exit.TIMEOUT
        self.emit(dict(final.raw), job_text(final))
        return Exit.OK if final.succeeded else Exit.FAILED

    def cancel(self) -> int:
        job = self.portal.cancel(self.args.job)
        self.emit(dict(job.raw), job_text(job))
        return Exit.OK

    def cost(self) -> int:
        cost = self.portal.cost(self.args.job)
        self.emit(dict(cost.raw), job_cost_text(cost))
        return Exit.OK

    def jobs(self) -> int:
        states = [s.strip() for item in self.args.state or [] for s in item.split(",") if s.strip()]
        limit = None if self.args.all else max(0, self.args.limit)
        found = list(
            self.portal.jobs(
                state=states or None, team=self.args.team, queue=self.args.queue, kind=self.args.kind, limit=limit
            )
        )
        self.emit([dict(job.raw) for job in found], job_table(found) if found else "no jobs")
        return Exit.OK

    def login(self) -> int:
        token = self.args.token or os.environ.get(TOKEN_ENV) or self._ask_token()
        settings = resolve(self.args.url, token, config=self.args.config)
        with Portal(settings.url, settings.token) as portal:
            teams = portal.teams()  # proves the token works before it is saved
        path = Path(self.args.config).expanduser() if self.args.config else config_path()
        write_config(path, url=settings.url, token=settings.token)
        self.emit(
            {"url": settings.url, "config": str(path), "teams": teams},
            f"the token works (teams: {', '.join(teams) or 'none'}); saved to {path}",
        )
        return Exit.OK

    def _ask_token(self) -> str:
        if not sys.stdin.isatty():
            raise ConfigError(f"no token: pass --token or set {TOKEN_ENV} (stdin is not a terminal to ask)")
        return getpass.getpass("API token (from the portal's Tokens page, /account/tokens/): ").strip()


def _split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``… -- python train.py --lr 0.1`` → (flags, the job's argv)."""
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, None


def main(argv: Sequence[str] | None = None, *, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """Run the CLI; returns the exit code (see ``Exit``)."""
    out = out or sys.stdout
    err = err or sys.stderr
    flags, command = _split_command(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    try:
        args = parser.parse_args(flags)
    except SystemExit as exc:  # argparse: --help/--version exit 0, errors exit 2
        return int(exc.code or 0)
    if command is not None and args.verb not in ("check", "submit"):
        err.write(f"gpuportal {args.verb}: unexpected arguments after --\n")
        return Exit.USAGE
    args.argv_command = command
    cli = Cli(args, out, err)
    try:
        return int(getattr(cli, args.verb)())
    except ValidationError as exc:
        never = exc.reason is not None and exc.reason.waits is False  # the scheduler's "never fits"
        err.write("gpuportal: the portal refused it" + (":\n" if exc.errors else f": {exc.detail}\n"))
        for field, messages in exc.errors.items():
            for message in messages:
                err.write(f"  {field}: {message}\n")
        if args.json and exc.body is not None:
            json.dump(exc.body, out, indent=2, sort_keys=True)
            out.write("\n")
        return Exit.NEVER if never else Exit.USAGE
    except ConfigError as exc:
        err.write(f"gpuportal: {exc.detail}\n")
        return Exit.USAGE
    except (ValueError, TypeError) as exc:  # e.g. a job id that is not a number
        err.write(f"gpuportal: {exc}\n")
        return Exit.USAGE
    except PortalError as exc:
        err.write(f"gpuportal: {exc}\n")
        if exc.retry_after is not None:
            err.write(f"  the portal asks to retry after {exc.retry_after:g} s\n")
        return Exit.ERROR
    except KeyboardInterrupt:
        err.write("gpuportal: interrupted\n")
        return Exit.INTERRUPTED
    finally:
        if cli._portal is not None:
            cli._portal.close()


if __name__ == "__main__":  # pragma: no cover - the console script calls main()
    sys.exit(main())
