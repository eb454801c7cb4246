"""schemathesis, a fuzzer nobody here wrote, against a live server through its own CLI: no 5xx,
no undocumented status, no request the schema forbids accepted, 405 with `Allow` for methods a
route does not take, and every `$ref` resolves. Fixed seed and bounded examples, so the run is
the same each time.

`positive_data_acceptance` is left out: some rules span several fields (a time range's end not
before its start, forget naming what to forget) and JSON Schema cannot say them, so schemathesis
would build requests it believes valid that are not.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ServeProcess

ST = Path(sys.executable).parent / "st"


@pytest.mark.skipif(not ST.exists(), reason="schemathesis is not installed (the dev extra)")
def test_schemathesis_finds_nothing(tmp_path):
    server = ServeProcess.serve(tmp_path / "data", tmp_path)
    try:
        run = subprocess.run(
            [str(ST), "--no-color", "run", f"{server.url}/openapi.json", "--checks", "all",
             "--exclude-checks", "positive_data_acceptance", "--seed", "20261201", "--max-examples", "5",
             "--workers", "1", "--phases", "coverage,fuzzing"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    finally:
        server.stop()
    assert run.returncode == 0, run.stdout[-6000:]
