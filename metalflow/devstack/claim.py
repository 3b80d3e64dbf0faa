"""One stack per state dir: a running `metalflow dev` claims its state dir, and every command
finds that stack through it.

`metalflow dev` takes an exclusive `flock` on `stack.lock` in the state dir for as long as it
runs, and writes `stack.json` beside it: its pid, the Temporal address and namespace, the UI and
the simulated site's port. A second `metalflow dev` on the same state dir cannot take the lock
and is refused, naming the running stack (it would otherwise share `temporal.db` and overwrite
`temporal.toml`, `site.yaml`, `kubeconfig` and the credentials with its own ports). The kernel
drops the lock when the process ends, however it ends (even SIGKILL), so a stale `stack.json`
never passes for a running stack: `running_stack` believes the file only while the lock is held.

Cost: one open and one `flock` per `metalflow` command that looks for a stack; nothing else.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from metalflow.devstack.private import FILE_MODE, private_state_dir, write_private

STACK_FILE = "stack.json"
LOCK_FILE = "stack.lock"
CLIENT_CONFIG_FILE = "temporal.toml"


@dataclass(frozen=True)
class StackInfo:
    """What a running `metalflow dev` says about itself in `stack.json`."""

    pid: int
    address: str
    namespace: str
    ui_url: str
    sim_port: int

    def describe(self) -> str:
        return (
            f"pid {self.pid}: Temporal {self.address} (namespace {self.namespace}), UI {self.ui_url}, "
            f"simulated site on port {self.sim_port}"
        )


class StateDirInUseError(RuntimeError):
    """Another `metalflow dev` runs on this state dir; the message names it."""


@dataclass
class Claim:
    """The state dir held by this process; `release` (or the process's end) lets it go."""

    state_dir: Path
    fd: int | None

    def release(self) -> None:
        if self.fd is None:
            return
        (self.state_dir / STACK_FILE).unlink(missing_ok=True)
        os.close(self.fd)  # closing the only descriptor drops the flock
        self.fd = None


def claim(state_dir: Path, info: StackInfo) -> Claim:
    """Claim `state_dir` for the stack described by `info`.

    Raises:
        StateDirInUseError: Another process holds it; the message names its pid and ports.
    """
    private_state_dir(state_dir)
    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, FILE_MODE)  # not inherited by children
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        running = read_stack(state_dir)
        who = running.describe() if running is not None else "its details are not written yet"
        raise StateDirInUseError(
            f"state dir {state_dir.resolve()} is in use by another metalflow dev ({who}); "
            "stop that one (Ctrl-C in its terminal) or give this one another --state-dir"
        ) from None
    write_private(state_dir / STACK_FILE, json.dumps(asdict(info), indent=2) + "\n")
    return Claim(state_dir, fd)


def read_stack(state_dir: Path) -> StackInfo | None:
    """What `stack.json` says, or None when it is missing or unreadable (not checked for life)."""
    try:
        data = json.loads((state_dir / STACK_FILE).read_text())
        return StackInfo(
            pid=int(data["pid"]),
            address=str(data["address"]),
            namespace=str(data["namespace"]),
            ui_url=str(data["ui_url"]),
            sim_port=int(data["sim_port"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running_stack(state_dir: Path) -> StackInfo | None:
    """The `metalflow dev` running on `state_dir` now, or None (no stack, or one that ended)."""
    try:
        fd = os.open(state_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_stack(state_dir)  # held: a stack runs
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
