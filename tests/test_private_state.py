"""Private by default (metalflow/devstack/private.py): a state directory left readable by an older
release or a loose umask is narrowed when a stack starts, and what the stack writes is 0600."""

from __future__ import annotations

import stat
from pathlib import Path

from metalflow.devstack.private import private_state_dir, write_private
from metalflow.devstack.process import ManagedProcess


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_existing_loose_state_dir_is_narrowed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "credentials").mkdir(parents=True)
    state.chmod(0o755)
    (state / "credentials").chmod(0o755)
    for name in ("temporal.db", "worker.log", "kubeconfig"):
        (state / name).write_text("x")
        (state / name).chmod(0o644)
    private_state_dir(state)
    assert _mode(state) == 0o700 and _mode(state / "credentials") == 0o700
    assert {p.name: _mode(p) for p in state.iterdir() if p.is_file()} == dict.fromkeys(
        ("temporal.db", "worker.log", "kubeconfig"), 0o600
    )
    write_private(state / "kubeconfig", "y")  # rewritten: still 0600, new content
    assert _mode(state / "kubeconfig") == 0o600 and (state / "kubeconfig").read_text() == "y"


async def test_a_managed_process_log_and_what_it_creates_are_private(tmp_path: Path) -> None:
    created = tmp_path / "made-by-child.db"

    async def ready(_: ManagedProcess) -> bool:
        return created.exists()

    process = ManagedProcess(
        name="writer",
        argv=["sh", "-c", f"echo hello; echo data > {created}; sleep 30"],
        log_path=tmp_path / "writer.log",
        ready=ready,
    )
    await process.start()
    try:
        await process.wait_ready(60)
    finally:
        await process.stop()
    assert _mode(tmp_path / "writer.log") == 0o600
    assert _mode(created) == 0o600
