"""Lifelines: the processes metalflow starts stop by themselves when their parent dies.

The parent makes a pipe and keeps its write end; the child gets the read end (`--lifeline-fd N`)
and stops once a read returns end-of-file, which the kernel delivers when the last write end
closes: whenever the parent exits, SIGKILL included, so nothing is left behind. Python children
watch the pipe in their event loop (`watch_lifeline`; the simulator has its own few lines, as it
imports nothing of metalflow). The Go `temporal` binary cannot, so `python -m
metalflow.runtime.lifeline --fd N -- ARGV...` holds the lifeline for it: it runs ARGV, forwards
SIGTERM and SIGINT, and on end-of-file stops ARGV (SIGTERM, then SIGKILL after a grace period),
reaps it and exits with its status; should the wrapper itself be SIGKILLed (Temporal's SDK stops
the servers it spawned that way), ARGV gets SIGTERM from the kernel (Linux: PR_SET_PDEATHSIG).

Cost per child: one pipe (two file descriptors) and one blocked reader (a loop reader in Python
children; one thread and one small Python process for a wrapped binary); no polling, no timers
until the lifeline is cut.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

LIFELINE_ARG = "--lifeline-fd"
GRACE_SECONDS = 10.0


@dataclass
class Lifeline:
    """A pipe whose read end goes to one child and whose write end only the parent holds."""

    read_fd: int
    write_fd: int

    @classmethod
    def new(cls) -> Lifeline:
        # os.pipe gives close-on-exec ends: only a child that is passed the read end (pass_fds)
        # gets it, and no child ever inherits the write end, which would keep the line alive.
        read_fd, write_fd = os.pipe()
        return cls(read_fd, write_fd)

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run under the wrapper that holds this lifeline for it (for non-Python children)."""
        return [sys.executable, "-m", "metalflow.runtime.lifeline", "--fd", str(self.read_fd), "--", *argv]

    def spawned(self) -> None:
        """The child has its copy of the read end; the parent's copy would only leak."""
        with contextlib.suppress(OSError):
            os.close(self.read_fd)

    def cut(self) -> None:
        """Close the parent's end: the child sees end-of-file and stops."""
        with contextlib.suppress(OSError):
            os.close(self.write_fd)


def watch_lifeline(fd: int, on_cut: Callable[[], None], *, hard_exit_after: float | None = None) -> None:
    """Call `on_cut` in the running event loop once the parent's end of the lifeline closed.

    Args:
        fd: The read end, as passed with `--lifeline-fd`.
        on_cut: Starts the child's own graceful shutdown (e.g. sets its stop event).
        hard_exit_after: When set, the process exits with status 1 this many seconds after the
            cut if its graceful shutdown has not ended it by then (a worker whose server died
            with the same parent must not hang on for ever).
    """
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)

    def readable() -> None:
        try:
            data = os.read(fd, 64)
        except (BlockingIOError, InterruptedError):
            return
        if data:  # the parent never writes; anything read is ignored
            return
        loop.remove_reader(fd)
        os.close(fd)
        if hard_exit_after is not None:
            timer = threading.Timer(hard_exit_after, os._exit, (1,))
            timer.daemon = True
            timer.start()
        on_cut()

    loop.add_reader(fd, readable)


def _wait_for_end_of_file(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 64):
                return
        except InterruptedError:
            continue


def _stop_with_this_process(parent: int) -> Callable[[], None]:
    """A preexec_fn: the child gets SIGTERM when the wrapper dies, even of SIGKILL (Linux).

    Temporal's SDK stops the servers it spawned with SIGKILL, which here reaches the wrapper
    only; without this its binary would be orphaned. Elsewhere the lifeline alone applies.
    """

    def preexec() -> None:
        if sys.platform != "linux":
            return
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
        if os.getppid() != parent:  # the wrapper died before prctl took effect
            os._exit(1)

    return preexec


def run_wrapped(fd: int, argv: list[str], grace: float = GRACE_SECONDS) -> int:
    """Run `argv` until it exits, stopping it when the lifeline `fd` is cut; return its status."""
    # close_fds: the child never holds the lifeline itself. No thread runs yet (preexec_fn).
    child = subprocess.Popen(argv, preexec_fn=_stop_with_this_process(os.getpid()))
    exited = threading.Event()

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)

    def watch() -> None:
        _wait_for_end_of_file(fd)
        if exited.is_set():
            return
        with contextlib.suppress(ProcessLookupError):
            child.terminate()
        if not exited.wait(grace):
            with contextlib.suppress(ProcessLookupError):
                child.kill()

    threading.Thread(target=watch, name="lifeline", daemon=True).start()
    status = child.wait()
    exited.set()
    return 128 - status if status < 0 else status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m metalflow.runtime.lifeline",
        description="Run a command; stop it when the lifeline (a pipe from the parent) closes.",
    )
    parser.add_argument("--fd", type=int, required=True, help="read end of the lifeline pipe")
    parser.add_argument("--grace", type=float, default=GRACE_SECONDS, help="seconds from SIGTERM to SIGKILL")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- ARGV...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")
    try:
        return run_wrapped(args.fd, command, args.grace)
    except OSError as err:
        print(f"lifeline: cannot run {command[0]}: {err}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
