"""Every `metalflow` command's exit statuses, in one place: README's table is `table()`'s output
(tests/fast/test_exit_codes.py compares them), and every command returns one of these.

The rule that places a case: 1 the world said no (the operation failed, or what runs or is set
up now refuses it: a busy host, a campaign's rules, a rollout in flight), so the same command may
succeed once the world changed; 2 the command itself is wrong (bad input, or it names something
that does not exist: an unknown host, DPU, campaign or PodCliqueSet), so repeating it cannot help;
3 metalflow could not ask (Temporal, the cluster, the simulator or a BMC cannot be reached, or
no worker serves the workflow asked or it did not answer in time: nothing was changed), so
repeating it later may help; 4 an operator's abort ended what the command followed or shows (an
abort is asked for: neither a failure nor a refusal).

`--json`: a command given `--json` prints exactly one JSON document on stdout whatever its status
(`JsonOutput`): what it shows, or, when it ends with nothing shown, `{"error": ..., "exit_status":
N}` (the last line it wrote on stderr, which it writes as without --json).
"""

from __future__ import annotations

import io
import json
import sys
from typing import Any, Final, TextIO

OK: Final = 0
FAILED: Final = 1
USAGE: Final = 2
UNREACHABLE: Final = 3
ABORTED: Final = 4
INTERRUPTED: Final = 130  # 128 + SIGINT, as a shell reports Ctrl-C
# 128 + SIGPIPE: what `cat` or `grep` report when their reader goes away, so `set -o pipefail`
# scripts see the usual broken pipe, never one of the statuses above (1 would read as a failure).
BROKEN_PIPE: Final = 141

TABLE: Final[tuple[tuple[int, str], ...]] = (
    (OK, "done: the command did what it was asked (without `--wait`: the request was accepted); "
     "a status command showed a workflow that runs or completed"),
    (FAILED, "the operation failed, or the world refused it: a host busy or not awaiting what was "
     "asked, a campaign its rules refuse, a rollout in flight or an outage not allowed, an update "
     "the workflow refused, a name already running; a status command of a run that failed, was "
     "terminated or timed out"),
    (USAGE, "bad input or an unknown object: a usage error, a value out of range, a bad setting or "
     "site file, a state dir or port already taken (`dev`, `sim up`), or a name that does not "
     "exist (host, DPU, group, campaign, rollout, schedule, PodCliqueSet, simulator); nothing was "
     "changed"),
    (UNREACHABLE, "cannot reach Temporal, the cluster, the simulator or a BMC (or lost it "
     "midway), or no worker serves the workflow asked or it did not answer in time (nothing was "
     "changed, unless a `--wait` says its request was accepted and stands: only the following "
     "stopped, or a request no worker took says it may still run once a worker is back); try again "
     "once it is back"),
    (ABORTED, "aborted by an operator, as asked: the operation, campaign or rollout followed (`--wait`) "
     "or shown (a status command) stopped at its safe point and says `aborted by <who>: <reason>`; "
     "or a host operation `--wait` followed was cancelled in Temporal (`temporal workflow cancel`): "
     "`<id> cancelled in Temporal ..., not by an operator's abort. Done: ...` (its own words: what "
     "it did and left, the host's power); not a failure"),
    (INTERRUPTED, "interrupted (Ctrl-C) while waiting; the workflows go on"),
    (BROKEN_PIPE, "the reader of stdout went away (a `head -1` after the pipe), as `cat` reports it"),
)  # fmt: skip


def table() -> str:
    """README's exit-status table (Markdown)."""
    rows = ["| status | means |", "| --- | --- |"]
    rows += [f"| {status} | {means} |" for status, means in TABLE]
    return "\n".join(rows)


class _Watched(io.TextIOBase):
    """A stream that passes everything on and remembers what was written (stdout: whether
    anything; stderr: its last line)."""

    def __init__(self, inner: TextIO, keep_text: bool) -> None:
        self.inner, self.keep_text, self.wrote, self.text = inner, keep_text, False, ""

    def write(self, text: str) -> int:
        if text:
            self.wrote = True
            if self.keep_text:
                self.text = (self.text + text)[-4000:]
        return self.inner.write(text)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ReaderGone(BaseException):
    """The reader of stdout went away (`metalflow ... | head -1`): raised by every write to stdout
    once `guard_stdout` is in place, in place of BrokenPipeError. A BaseException, as Ctrl-C's is:
    a command's `except Exception` (which turns an error into one line and exit 1) must not catch
    it, so every command ends the same way: quietly, exit 141 (`metalflow.cli.main`)."""


class _PipeGuard(_Watched):
    """stdout, with a BrokenPipeError from a write or flush raised as `ReaderGone`."""

    def write(self, text: str) -> int:
        try:
            return self.inner.write(text)
        except BrokenPipeError:
            raise ReaderGone from None

    def flush(self) -> None:
        try:
            self.inner.flush()
        except BrokenPipeError:
            raise ReaderGone from None


def guard_stdout() -> None:
    """From here on, the reader of stdout going away raises `ReaderGone` (once per process)."""
    if not isinstance(sys.stdout, _PipeGuard):
        sys.stdout = _PipeGuard(sys.stdout, keep_text=False)


class JsonOutput:
    """While a `--json` command runs: stdout and stderr watched, so that `finish` can print the
    error document of a command that ends having printed nothing on stdout."""

    _active: JsonOutput | None = None

    def __init__(self) -> None:
        self.out = _Watched(sys.stdout, keep_text=False)
        self.err = _Watched(sys.stderr, keep_text=True)
        self.saved = (sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = self.out, self.err
        JsonOutput._active = self

    @classmethod
    def finish(cls, status: int) -> None:
        """The command ends with `status`: with `--json` and nothing on stdout, print the error
        document; put the streams back. Idempotent; nothing without `--json`."""
        active, cls._active = cls._active, None
        if active is None:
            return
        sys.stdout, sys.stderr = active.saved
        if not active.out.wrote and status not in (OK, BROKEN_PIPE):
            lines = [line for line in active.err.text.splitlines() if line.strip()]
            message = lines[-1] if lines else f"exit status {status}"
            print(json.dumps({"error": message.removeprefix("metalflow: "), "exit_status": status}))
        sys.stdout.flush()
