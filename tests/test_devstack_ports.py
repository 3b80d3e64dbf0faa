"""The dev stack's Temporal server is started again when a port it picked itself was taken.

`temporal server start-dev` is given its gRPC and UI ports; its HTTP, metrics and internal
service ports it picks itself, and under parallel tests another process took one between its
pick and its bind (`bind: address already in use`, tests/test_chaos.py once). Here the first
start is given an HTTP port this test holds, so it fails exactly that way; the stack starts it
again (without the taken port) and the server serves. The real dev server, no mock.
"""

from __future__ import annotations

import socket
from pathlib import Path

from ports_support import free_port
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

from metalflow.devstack.stack import DevStack, DevStackConfig


async def test_a_port_taken_under_the_dev_server_at_start_is_retried(tmp_path: Path) -> None:
    said: list[str] = []
    stack = DevStack(
        DevStackConfig(state_dir=tmp_path / "state", port=free_port(), ui_port=free_port()), say=said.append
    )
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    plain = stack._server_argv
    calls: list[list[str]] = []

    def argv() -> list[str]:
        calls.append(plain() + (["--http-port", str(taken)] if not calls else []))
        return calls[-1]

    stack._server_argv = argv  # type: ignore[method-assign]
    try:
        stack.config.state_dir.mkdir(parents=True)
        stack._write_client_config()
        await stack._start_server()
        assert len(calls) == 2
        assert any("starting it again" in line for line in said), said
        client = await stack.client()
        assert (await client.workflow_service.get_system_info(GetSystemInfoRequest())).server_version
    finally:
        held.close()
        await stack.stop()
