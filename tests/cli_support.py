"""`metalflow ...` run in the test's own process, for tests about what a command does rather than
about the process that runs it (exit status, stdout and stderr are the same as a subprocess's).

Why: a `python -m metalflow` subprocess spends about 1.5 s of CPU importing before it does anything;
on the 2-core machine that runs four pytest workers, that CPU is most of such a test's cost. Tests
about the process itself (signals, a killed parent, `python -m`) keep a real subprocess.

The command runs in a thread of its own: its `asyncio.run` gets a fresh event loop there and leaves
the test session's loop alone. Its stdout and stderr are redirected while it runs, so use it from
synchronous tests (an async test's concurrent prints would land in the captured output), one
command at a time. Environment variables are the test process's own (as a subprocess would inherit
them); a command that needs other variables belongs in a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import threading
from pathlib import Path

from metalflow.cli import main

TIMEOUT_SECONDS = 120


def run_metalflow(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run `metalflow *args` in this process; the result reads like `subprocess.run`'s."""
    argv = [str(arg) for arg in args]
    stdout, stderr = io.StringIO(), io.StringIO()
    status: list[int] = []
    failure: list[BaseException] = []

    def command() -> None:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                status.append(main(argv))
            except SystemExit as exit_:  # argparse's usage errors and --help
                code = exit_.code
                status.append(code if isinstance(code, int) else 0 if code is None else 1)
            except BaseException as error:  # re-raised in the test, with its traceback
                failure.append(error)

    thread = threading.Thread(target=command, name=f"metalflow {' '.join(argv[:2])}", daemon=True)
    thread.start()
    thread.join(TIMEOUT_SECONDS)
    if thread.is_alive():
        raise TimeoutError(f"metalflow {' '.join(argv)} did not return within {TIMEOUT_SECONDS} s")
    if failure:
        raise failure[0]
    return subprocess.CompletedProcess(["metalflow", *argv], status[0], stdout.getvalue(), stderr.getvalue())
