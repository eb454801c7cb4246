"""A newcomer's first run: clone the repository, run `./scripts/cerememory serve`, and time it until
the server answers /readiness; then the size of the .venv it made.

Targets: healthy within 90 s, .venv at most 500 MB. The time includes creating the virtualenv and
every pip install (from pip's cache when the machine has one, as a developer's would).

    python bench/first_run.py [--keep]     # writes bench/results/first_run.md and .json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO_DIR, RESULTS_DIR, LoadMonitor, env_line, environment, md_table, verdict  # noqa: E402

TARGET_SECONDS = 90.0
TARGET_MB = 500.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _size_mb(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            p = Path(root) / name
            if not p.is_symlink():
                total += p.stat().st_size
    return total / 2**20


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readiness", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the clone behind")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="cerememory-first-run-"))
    clone = work / "cerememory"
    subprocess.run(["git", "clone", "-q", str(REPO_DIR), str(clone)], check=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CEREMEMORY_", "VIRTUAL_ENV", "PYTHONPATH"))}
    log = (work / "serve.log").open("w")
    load = LoadMonitor()
    start = time.perf_counter()
    server = subprocess.Popen([str(clone / "scripts" / "cerememory"), "serve", "--port", str(port),
                               "--data-dir", str(work / "data")], cwd=clone, env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    healthy = None
    try:
        while time.perf_counter() - start < args.timeout and server.poll() is None:
            if _ready(url):
                healthy = time.perf_counter() - start
                break
            time.sleep(0.25)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        log.close()
    others = load.others_cores()
    venv_mb = _size_mb(clone / ".venv")
    setup_lines = [line for line in (work / "serve.log").read_text().splitlines() if "cerememory setup" in line]
    has_torch = any((clone / ".venv").glob("lib/python*/site-packages/torch"))

    info = environment()
    result = {"healthy_seconds": healthy, "venv_mb": venv_mb, "torch_installed": has_torch,
              "other_processes_cores": others, "setup_progress": setup_lines, "environment": info}
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "first_run.json").write_text(json.dumps(result, indent=2) + "\n")
    rows = [["first `./scripts/cerememory serve` healthy (s)",
             healthy if healthy is not None else float("nan"), TARGET_SECONDS,
             verdict(healthy is not None and healthy <= TARGET_SECONDS)],
            [".venv size (MB)", venv_mb, TARGET_MB, verdict(venv_mb <= TARGET_MB)]]
    md = ["# First run from a fresh clone", "",
          f"Environment: {env_line(info)}. Other processes kept {others:.1f} of {os.cpu_count()} cores busy "
          "on average while this ran.", "",
          md_table(["measure", "value", "target", "verdict"], rows), "",
          f"PyTorch installed: {'yes' if has_torch else 'no'}. The progress the set-up printed:", "",
          "```", *setup_lines, "```", "",
          "Reproduce: `python bench/first_run.py` (clones this checkout into a temporary directory; pip "
          "uses its cache when the machine has one).", ""]
    (RESULTS_DIR / "first_run.md").write_text("\n".join(md))
    print("\n".join(md))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")


if __name__ == "__main__":
    main()
