"""Benchmark: how long the first chart page takes in a real browser, with plotly's bundle served as the
portal serves it in production (collected, content-hashed, brotli/gzip via whitenoise, behind gunicorn).

Usage:

    .venv/bin/python bench/bench_first_chart.py [--repeat 5] [--static-dir /tmp/portal-static]

Target (issue 11): the first chart page (the dashboard, cold browser cache, right after signing in)
draws its first chart in at most 1 s on this machine.

Steps:
1. Collect the static files once into ``--static-dir`` (whitenoise compresses them: about two
   minutes, reused while the directory holds plotly's bundle) and, beside it, what the portal sent
   before: the same files without their .br/.gz siblings and plotly's full bundle (4.8 MB) in place
   of the basic one, uncompressed.
2. Migrate a fresh SQLite database and load the demo data (``seed_demo``).
3. Serve the portal with gunicorn twice, side by side: compressed static files and uncompressed.
4. For each server, ``--repeat`` times: a new browser context (empty cache), sign in, open
   ``/dashboard/`` and wait until the first chart's SVG is drawn; then open it again (warm cache).
   Report the median milliseconds and the bytes plotly's bundle took on the wire.

Debian's chromium, driven by Playwright (as the browser tests do).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(database: str, static_root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "SECRET_KEY": "bench-only-secret-key-not-for-production-0123456789",
        "DATABASE_URL": database,
        "REDIS_URL": "",
        "DEBUG": "0",
        "SECURE_SSL_REDIRECT": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "SECURE_HSTS_SECONDS": "0",
        "AXES_ENABLED": "0",
        "LOG_LEVEL": "WARNING",
        "STATIC_ROOT": str(static_root),
    }


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


def collect(static_dir: Path, env: dict[str, str]) -> tuple[Path, Path]:
    """Step 1: the collected, compressed files and an uncompressed copy."""
    compressed, plain = static_dir / "compressed", static_dir / "plain"
    if not list((compressed / "vendor" / "plotly").glob("plotly-basic.min.*.js.br")):
        print("collecting static files (whitenoise compresses them; about two minutes)...", flush=True)
        started = time.perf_counter()
        manage({**env, "STATIC_ROOT": str(compressed)}, "collectstatic", "--noinput", "--clear")
        print(f"  collected in {time.perf_counter() - started:.0f} s", flush=True)
    if plain.exists():
        shutil.rmtree(plain)
    shutil.copytree(compressed, plain, ignore=shutil.ignore_patterns("*.br", "*.gz"))
    # What the portal sent before: plotly's full bundle (4.8 MB), uncompressed, under the same name.
    import plotly

    full = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    for target in (plain / "vendor" / "plotly").glob("plotly-basic.min*.js"):
        shutil.copyfile(full, target)
    return compressed, plain


def serve(env: dict[str, str], port: int) -> subprocess.Popen:
    process = subprocess.Popen(
        [PYTHON, "-m", "gunicorn", "portal.wsgi:application", "--bind", f"127.0.0.1:{port}", "--workers", "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("gunicorn did not start")


def first_chart(browser, base: str) -> tuple[float, float, int, str]:
    """(cold ms, warm ms, plotly bytes on the wire, its Content-Encoding) for one fresh browser context."""
    context = browser.new_context(base_url=base, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "demo")
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_load_state("load")
    wire: dict[str, int | str] = {}

    def seen(response) -> None:
        if "/plotly" in response.url and "bytes" not in wire:
            sizes = response.request.sizes()
            wire["bytes"] = sizes["responseBodySize"]
            wire["encoding"] = response.headers.get("content-encoding", "identity")

    page.on("response", seen)
    timings = []
    for _ in range(2):  # cold (empty cache), then warm
        started = time.perf_counter()
        page.goto("/dashboard/", wait_until="commit")
        page.wait_for_selector(".js-plotly-plot .main-svg", state="attached", timeout=30_000)
        timings.append((time.perf_counter() - started) * 1000)
    context.close()
    return timings[0], timings[1], int(wire.get("bytes", 0)), str(wire.get("encoding", "?"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--static-dir", default=str(Path(tempfile.gettempdir()) / "portal-bench-static"))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="first-chart-"))
    database = f"sqlite:///{work / 'db.sqlite3'}"
    env = environment(database, work / "unused")
    compressed, plain = collect(Path(args.static_dir), env)
    print("loading the demo data...", flush=True)
    manage(env, "migrate", "--noinput")
    manage(env, "seed_demo")
    servers = {
        "basic, compressed (now)": ({**env, "STATIC_ROOT": str(compressed)}, free_port()),
        "full, uncompressed (before)": ({**env, "STATIC_ROOT": str(plain)}, free_port()),
    }
    processes = [serve(server_env, port) for server_env, port in servers.values()]
    try:
        results: dict[str, list[tuple[float, float, int, str]]] = {name: [] for name in servers}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for _ in range(args.repeat):  # interleaved, so both see the same machine load
                for name, (_, port) in servers.items():
                    results[name].append(first_chart(browser, f"http://127.0.0.1:{port}"))
            browser.close()
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nfirst chart drawn on /dashboard/ (median of {args.repeat}, Debian chromium, gunicorn + whitenoise)")
    print(f"{'plotly served':<30}{'cold cache':>12}{'warm cache':>12}{'plotly on the wire':>22}")
    for name, rows in results.items():
        cold = statistics.median(r[0] for r in rows)
        warm = statistics.median(r[1] for r in rows)
        size, encoding = rows[-1][2], rows[0][3]
        print(f"{name:<30}{cold:>10.0f} ms{warm:>10.0f} ms{size / 1e6:>12.2f} MB ({encoding})")
    cold_now = statistics.median(r[0] for r in results["basic, compressed (now)"])
    print(f"\ntarget: first chart <= 1000 ms with a cold cache: {'met' if cold_now <= 1000 else 'NOT met'}")


if __name__ == "__main__":
    main()
