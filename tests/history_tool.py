"""(Re)record the workflow histories the replay test replays.

    python tests/history_tool.py [PYTEST ARGS...]

runs the tests that record histories (by default: the host operation and host entity end-to-end
tests, and the barrier tests) with METALFLOW_RECORD_HISTORIES=1; each writes
tests/histories/<name>.json through `tests.host_operation_support.save_history`. Review the diff
and commit the files. Re-record only when a change is meant to break old histories (then version
the workflow instead, if runs of the old code may still be open)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DEFAULT_TESTS = [
    "tests/test_host_operation_e2e.py",
    "tests/test_host_entity_e2e.py",  # HostWorkflow, HostRebootWorkflow (bmc, manual)
    "tests/test_host_operation_barrier.py",  # an abort while a ForceOff+On reboot is in flight
]


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "METALFLOW_RECORD_HISTORIES": "1"}
    command = [sys.executable, "-m", "pytest", "-q", *(argv or DEFAULT_TESTS)]
    return subprocess.run(command, cwd=root, env=env, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
