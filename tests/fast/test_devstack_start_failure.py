"""A dev server that dies while starting: which deaths a second start may mend, and what the
message shows.

CI once failed `metalflow dev --no-demo` with the dev server's Go panic (exit status 2) in its
own `buildServer`: the message showed the last 20 lines of the log, all stack frames, and the
retry (which looked for `address already in use` in that tail) never ran. The cause line
(`panic: ...`) sits above a stack longer than the tail. These tests pin the rules on the shapes
the real binary writes; tests/test_devstack_ports.py runs the retry on the real binary.
"""

from __future__ import annotations

from pathlib import Path

from metalflow.devstack.process import ManagedProcess
from metalflow.devstack.stack import start_failure_cause, start_failure_is_transient

FRAMES = "".join(
    f"github.com/temporalio/cli/internal/devserver.frame{i}(0x3bd372a8aa00?)\n\t/cli/server.go:{i}\n"
    for i in range(40)
)
PANIC = "panic: failed assigning ephemeral port: failed to assign a free port: connection refused\n\n"
PANIC += "goroutine 1 [running]:\n" + FRAMES


async def never(_: ManagedProcess) -> bool:
    return False


def test_a_panic_or_a_taken_port_is_retried_a_refused_setting_or_a_slow_start_is_not() -> None:
    assert start_failure_is_transient(2, PANIC)
    assert start_failure_is_transient(1, "Error: listen tcp 127.0.0.1:4000: bind: address already in use\n")
    # How the CLI refuses a setting of ours: a retry would meet it again.
    assert not start_failure_is_transient(1, "Error: invalid search attribute type\n")
    assert not start_failure_is_transient(2, "Error: unknown flag: --bogus\n")  # 2 without a panic
    assert not start_failure_is_transient(None, PANIC)  # still running: not ready in time
    assert start_failure_cause(PANIC).startswith("panic: failed assigning ephemeral port")
    assert start_failure_cause("nothing useful\n") == "no cause in its log"


def test_the_tail_keeps_a_panics_cause_and_only_this_runs_lines(tmp_path: Path) -> None:
    log = tmp_path / "temporal.log"
    log.write_text("panic: from an earlier run\n" + FRAMES)
    process = ManagedProcess(name="server", argv=["true"], log_path=log, ready=never)
    process._log_offset = log.stat().st_size  # what start() records: the earlier run is not ours
    with log.open("a") as out:
        out.write(PANIC)
    tail = process.log_tail().splitlines()
    assert tail[0].startswith("panic: failed assigning ephemeral port"), tail[:3]
    assert tail[1] == "..."
    assert len(tail) == 22
    assert "earlier run" not in process.log_text()
    assert start_failure_is_transient(2, process.log_text())


def test_a_short_log_is_shown_whole_and_a_missing_one_says_so(tmp_path: Path) -> None:
    log = tmp_path / "temporal.log"
    process = ManagedProcess(name="server", argv=["true"], log_path=log, ready=never)
    assert process.log_tail() == "(no log)"
    log.write_text("panic: short\nframe\n")
    assert process.log_tail() == "panic: short\nframe"
