"""A child process the dev stack owns: started in its own process group, checked for readiness,
stopped with SIGTERM then SIGKILL, never left behind: it holds a lifeline (`lifeline.py`), so it
stops by itself when its parent dies, even of SIGKILL.

Adding a process to the stack (the simulated site, for instance) is one `ManagedProcess` with a
readiness check; `DevStack` starts them in order and stops them in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from metalflow.devstack.private import FILE_MODE, PRIVATE_UMASK
from metalflow.runtime.lifeline import LIFELINE_ARG, Lifeline

ReadinessCheck = Callable[["ManagedProcess"], Awaitable[bool]]
READINESS_POLL_SECONDS = 0.25
LOG_TAIL_LINES = 20


class ProcessFailedError(RuntimeError):
    """A managed process exited or never became ready; the message carries its log's tail."""


@dataclass
class ManagedProcess:
    """One child process of the dev stack.

    Attributes:
        name: What it is, for messages ("Temporal dev server").
        argv: The command line.
        log_path: Where its stdout and stderr go.
        ready: Answers True once the process serves what it is for; exceptions count as "not yet".
        env: Its environment (the parent's when None).
        stop_timeout: Seconds between SIGTERM and SIGKILL.
        lifeline: How the child learns that its parent died: "argument" appends
            `--lifeline-fd N` (a Python child that watches it), "wrapper" runs argv under the
            lifeline wrapper (a binary that cannot), None gives it none (a detached simulator
            outlives its parent on purpose).
    """

    name: str
    argv: list[str]
    log_path: Path
    ready: ReadinessCheck
    env: Mapping[str, str] | None = None
    stop_timeout: float = 15.0
    lifeline: Literal["argument", "wrapper"] | None = "argument"
    _process: asyncio.subprocess.Process | None = field(default=None, init=False, repr=False)
    _lifeline: Lifeline | None = field(default=None, init=False, repr=False)
    _log_offset: int = field(default=0, init=False, repr=False)

    @property
    def pid(self) -> int:
        """The process id (the process group id as well)."""
        if self._process is None:
            raise RuntimeError(f"{self.name} was not started")
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once it exited, else None."""
        return None if self._process is None else self._process.returncode

    async def start(self) -> None:
        """Start the process in a new session, so stopping it reaches all its children too."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:  # the log is appended to: what this run wrote starts here
            self._log_offset = self.log_path.stat().st_size
        except FileNotFoundError:
            self._log_offset = 0
        argv, pass_fds = list(self.argv), tuple[int, ...]()
        if self.lifeline is not None:
            self._lifeline = lifeline = Lifeline.new()
            pass_fds = (lifeline.read_fd,)
            if self.lifeline == "wrapper":
                argv = lifeline.wrap(argv)
            else:
                argv += [LIFELINE_ARG, str(lifeline.read_fd)]
        try:
            fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
            with os.fdopen(fd, "ab") as log:
                os.fchmod(log.fileno(), FILE_MODE)
                self._process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                    env=None if self.env is None else dict(self.env),
                    start_new_session=True,
                    pass_fds=pass_fds,
                    umask=PRIVATE_UMASK,  # what it creates (a database, sim.json) is 0600 too
                )
        except BaseException:
            if self._lifeline is not None:
                self._lifeline.cut()
            raise
        finally:
            if self._lifeline is not None:
                self._lifeline.spawned()

    async def wait_ready(self, timeout: float) -> None:
        """Wait until the readiness check passes.

        Raises:
            ProcessFailedError: It exited first, or was not ready within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            if self.returncode is not None:
                raise ProcessFailedError(
                    f"{self.name} exited with status {self.returncode} while starting; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            try:
                if await asyncio.wait_for(self.ready(self), timeout=max(1.0, deadline - time.monotonic())):
                    return
            except (Exception, TimeoutError):  # not ready yet; the deadline decides
                pass
            if time.monotonic() >= deadline:
                raise ProcessFailedError(
                    f"{self.name} was not ready within {timeout:.0f} s; last lines of {self.log_path}:\n"
                    f"{self.log_tail()}"
                )
            await asyncio.sleep(READINESS_POLL_SECONDS)

    async def wait_exit(self) -> int:
        """Wait until the process exits and return its status."""
        if self._process is None:
            raise RuntimeError(f"{self.name} was not started")
        return await self._process.wait()

    async def stop(self) -> int | None:
        """Stop the whole process group: SIGTERM, then SIGKILL after ``stop_timeout`` seconds.

        Returns:
            The exit status, or None when it was never started.
        """
        if self._process is None:
            return None
        process = self._process
        if process.returncode is None:
            # The leader only: a lifeline wrapper forwards it to its binary, which must not get
            # it twice (a second SIGTERM can cut a server's graceful stop short).
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout=self.stop_timeout)
            except TimeoutError:
                self._signal_group(signal.SIGKILL)
                await process.wait()
        # Children that outlived their leader (the group id is still ours) go too.
        self._signal_group(signal.SIGKILL)
        if self._lifeline is not None:
            self._lifeline.cut()
        return process.returncode

    def _signal_group(self, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def log_text(self) -> str:
        """What this run of the process wrote to its log (an earlier run's lines excluded)."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of this run's log, for error messages; a Go panic's first line (its
        cause, above a stack trace longer than the tail) is kept in front of them."""
        text = self.log_text().splitlines()
        if not text:
            return "(no log)" if not self.log_path.exists() else "(empty log)"
        tail = text[-lines:]
        cause = next((line for line in text if line.startswith("panic: ")), None)
        if cause is not None and cause not in tail:
            tail = [cause, "..."] + tail
        return "\n".join(tail)
