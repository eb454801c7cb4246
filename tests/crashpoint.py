"""`kill -9` of a child process at a named crash point (see cerememory/crashpoints.py).

The child stops itself (SIGSTOP) when it reaches the point; this waits for that stop, then sends
SIGKILL, so the kill always lands at the same instant of the child's work.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading

from cerememory.crashpoints import ENV

GUARD_SECONDS = 300  # a child that never reaches the point is killed, and the test fails


def kill_at(point: str, command: list[str], env: dict[str, str]) -> str:
    """Run `command` until it stops at `point` (`name` or `name:n`), kill it with SIGKILL and
    return what it wrote to stderr. Fails if it exits without reaching the point."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, env={**env, ENV: point}, stdout=subprocess.DEVNULL, stderr=err)
        guard = threading.Timer(GUARD_SECONDS, proc.kill)
        guard.start()
        try:
            _, status = os.waitpid(proc.pid, os.WUNTRACED)
        finally:
            guard.cancel()
        stopped = os.WIFSTOPPED(status)
        if stopped:
            os.kill(proc.pid, signal.SIGKILL)
            os.waitpid(proc.pid, 0)
        proc.returncode = -signal.SIGKILL  # reaped here: Popen must not wait for it again
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    assert stopped, f"the child exited without reaching {point}: {stderr}"
    assert f"stopped at {point.partition(':')[0]}" in stderr, stderr
    return stderr
