"""A throw-away portal stack for the chaos script and the benchmarks: its own PostgreSQL and Redis on
ports of their own (never the shared ones), Celery workers, beat and gunicorn, all started and
stopped by the calling script.

``Stack`` owns a temporary directory: the PostgreSQL data directory (``initdb``, run as the
``postgres`` user when the script runs as root, as PostgreSQL refuses root), Redis, the logs. Every
process it starts is stopped by ``close()`` (and by the ``with`` block), by its own pid.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], object], *, timeout_s: float, what: str, every_s: float = 0.2) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


def pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found: install PostgreSQL's server package")
    return path


class Postgres:
    """A PostgreSQL cluster of our own in ``directory`` on ``port`` (trust auth, no fsync: scratch data)."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.data = directory / "pgdata"
        self.port = port
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_postgres, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def init(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.as_postgres:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run(pg_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.directory} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            pg_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.directory / "pg.log"), "-w", "start"
        )

    def stop(self) -> None:
        self._run(pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def create_database(self, name: str) -> str:
        self._run(pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        with suppress(subprocess.CalledProcessError):
            self.stop()

    def cpu_s(self) -> float:
        """CPU seconds used so far by the server and its live backends (its children), from ``/proc``."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        return tree_cpu_s(postmaster)


class Stack:
    """The processes of one run. Use as a context manager; everything started is stopped at the end."""

    def __init__(self, name: str, *, keep: bool = False) -> None:
        self.name = name
        self.tmp = Path(tempfile.mkdtemp(prefix=f"portal-{name}-"))
        os.chmod(self.tmp, 0o755)
        self.keep = keep
        self.processes: list[subprocess.Popen] = []
        self.postgres: Postgres | None = None
        self.redis: subprocess.Popen | None = None
        self.redis_port = 0
        self.env: dict[str, str] = {}

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def log(self, name: str) -> Path:
        return self.tmp / f"{name}.log"

    def start_postgres(self, port: int) -> str:
        self.postgres = Postgres(self.tmp / "pg", port)
        self.postgres.init()
        return self.postgres.create_database(self.name)

    def start_redis(self, port: int) -> str:
        self.redis_port = port
        self._spawn_redis()
        return f"redis://127.0.0.1:{port}/0"

    def _spawn_redis(self) -> None:
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=self.log("redis").open("a"),
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: self._redis_up(), timeout_s=10, what="redis")

    def _redis_up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.redis_port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop_redis(self) -> None:
        assert self.redis is not None
        self.redis.terminate()
        self.redis.wait(timeout=10)

    def restart_redis(self, down_s: float = 0.0) -> None:
        self.stop_redis()
        time.sleep(down_s)
        self._spawn_redis()

    def environment(self, **extra: str) -> dict[str, str]:
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "portal.settings", **extra}
        return self.env

    def spawn(self, name: str, command: list[str], **env: str) -> subprocess.Popen:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**self.env, **env},
            stdout=self.log(name).open("a"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def manage(self, *args: str, timeout_s: float = 300) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def worker(self, index: int, queue: str, *, concurrency: int = 1, nice: int = 0) -> subprocess.Popen:
        command = ["nice", "-n", str(nice)] if nice else []
        command += [sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", queue, "-c", str(concurrency)]
        command += ["-P", "prefork", "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
        return self.spawn(f"worker{index}", [*command, "-n", f"w{index}-{queue}@%h"])

    def beat(self) -> subprocess.Popen:
        schedule = str(self.tmp / "beat-schedule")
        return self.spawn(
            "beat", [sys.executable, "-m", "celery", "-A", "portal", "beat", "-s", schedule, "-l", "INFO"]
        )

    def web(self, port: int, *, workers: int = 2, threads: int = 1, extra: tuple[str, ...] = ()) -> str:
        """Start gunicorn (``self.web_process``) and return its URL once it answers.

        ``--preload``: the master imports the application before it opens the port, and the workers it
        forks serve at once. Without it the port opened before the workers had imported the portal
        (several seconds of CPU each on this machine), so a benchmark started on the open port measured
        its first requests queued behind two imports, and counted the imports as the web's CPU."""
        command = [sys.executable, "-m", "gunicorn", "portal.wsgi", "--bind", f"127.0.0.1:{port}", "--preload"]
        command += ["--workers", str(workers), "--threads", str(threads), "--timeout", "60", *extra]
        self.web_process = self.spawn("web", command)
        url = f"http://127.0.0.1:{port}"

        def answers() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return True
            except OSError:
                return False

        wait_until(answers, timeout_s=30, what="gunicorn")
        return url

    def close(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if self.redis is not None and self.redis.poll() is None:
            self.redis.terminate()
            self.redis.wait(timeout=10)
        if self.postgres is not None:
            self.postgres.close()
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _cpu_s(select: Callable[[int, list[str]], bool]) -> float:
    """CPU seconds (user + system) used so far by the live processes ``select(pid, stat fields)`` picks,
    from ``/proc`` (the fields after the command name: [1] the parent's id, [3] the session id)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if select(int(stat.split("/")[2]), fields):
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def group_cpu_s(process: subprocess.Popen) -> float:
    """CPU seconds used so far by every live process of ``process``'s session (it and the children it
    forked: gunicorn's or Celery's workers); spawn() starts a new session per process."""
    return _cpu_s(lambda pid, fields: int(fields[3]) == process.pid)


def tree_cpu_s(root: int) -> float:
    """CPU seconds used so far by process ``root`` and its live children."""
    return _cpu_s(lambda pid, fields: pid == root or int(fields[1]) == root)


@contextmanager
def django_against(env: dict[str, str]) -> Iterator[None]:
    """Set up Django in this process against ``env``'s database (call once, before any model import)."""
    os.environ.update({k: v for k, v in env.items() if k not in ("PYTHONPATH",)})
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    yield
