"""Every `metalflow` command that talks to Temporal, with the server gone mid-command: one line on
stderr, exit 3 (README's exit-status table; issue 9 item 5 made it exit 2), no traceback.

"Gone mid-command" is made exact with a TCP proxy in front of a real Temporal dev server: it
forwards the command's connection (the client's `GetSystemInfo` at connect succeeds), and the
moment the command opens its next gRPC call (the second HTTP/2 HEADERS frame from the client) it
closes every connection and stops listening, as a server that died would. So each command is cut
after it connected, on the first call that does its work; nothing depends on timing.

The commands here keep to a short retry window (METALFLOW_CONNECT_TIMEOUT, README): that they
say they lost Temporal is the claim, not how long the SDK's default 10 s takes. The default is
kept by one test: a Temporal back within it is reached, a shorter `--connect-timeout` is not.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from cli_support import command_env, entity_exists, run_in_few_processes, write_unreachable_site
from rollout_support import INFERENCE, grove_site
from temporalio.client import Client

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HEADERS = 0x1


class DyingServer:
    """A proxy to Temporal that goes away when the client opens its second gRPC call."""

    def __init__(self, target: str) -> None:
        self._target_host, port = target.rsplit(":", 1)
        self._target_port = int(port)
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self.gone = asyncio.Event()
        # Set only when the client opened its second call: `gone` is also set by `close()` at the
        # end of the test, so it cannot tell whether the command was cut mid-command.
        self.cut = False

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def close(self) -> None:
        self._die()
        if self._server is not None:
            await self._server.wait_closed()

    def _die(self) -> None:
        self.gone.set()
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.transport.abort()  # a reset, as from a dead process

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.gone.is_set():
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection(self._target_host, self._target_port)
        self._writers += [writer, up_writer]
        await asyncio.gather(
            self._client_to_server(reader, up_writer),
            self._pipe(up_reader, writer),
            return_exceptions=True,
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if self.gone.is_set():
                return
            writer.write(data)
            await writer.drain()

    async def _client_to_server(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Forward whole HTTP/2 frames; die instead of forwarding the second HEADERS frame."""
        writer.write(await reader.readexactly(len(_PREFACE)))
        calls = 0
        while not self.gone.is_set():
            header = await reader.readexactly(9)
            length, kind = int.from_bytes(header[:3], "big"), header[3]
            payload = await reader.readexactly(length)
            if kind == _HEADERS and not self.cut:  # once: a `RestartingServer` forwards again
                calls += 1
                if calls == 2:
                    self.cut = True
                    self._die()
                    return
            writer.write(header + payload)
            await writer.drain()


class RestartingServer(DyingServer):
    """A proxy to Temporal that goes away when the client opens its second gRPC call (the call
    fails, the client's next connections are refused) and listens again on its port `down`
    seconds later, forwarding everything: a Temporal restarting."""

    def __init__(self, target: str, down: float) -> None:
        super().__init__(target)
        self._down = down
        self._port = 0
        self._back: asyncio.Task[None] | None = None

    async def start(self) -> str:
        address = await super().start()
        self._port = int(address.rsplit(":", 1)[1])
        return address

    def _die(self) -> None:
        super()._die()
        self._writers.clear()
        if self._back is None:
            self._back = asyncio.get_running_loop().create_task(self._come_back())

    async def _come_back(self) -> None:
        assert self._server is not None
        await self._server.wait_closed()
        await asyncio.sleep(self._down)
        self.gone.clear()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self._port)

    async def close(self) -> None:
        if self._back is not None:
            self._back.cancel()
        await super().close()


HOST = f"gone-{uuid.uuid4().hex[:8]}"
PCS = "default/inference"
CAMPAIGN = f"gone-{uuid.uuid4().hex[:8]}"
# Every command that talks to Temporal (`dev`, `sim` and `bmc` do not); a queue nobody polls, so
# a command that got through would not act on anything. `host reprovision` and `host firmware`
# first need DPF's objects of the host's DPUs, which this site's host has not: they are refused
# before Temporal is asked (tests/test_cli_inventory_cluster.py); past that check they send their
# request as `provision` and `reboot` do, through the same code.
COMMANDS: list[list[str]] = [
    ["host", "provision", HOST],
    ["host", "provision", HOST, "--wait"],
    ["host", "reboot", HOST, "--wait"],
    ["host", "remove", HOST],
    ["host", "monitor", HOST],
    ["host", "monitor", HOST, "--status"],
    ["host", "monitor", HOST, "--stop"],
    ["host", "retry", HOST],
    ["host", "abort", HOST],
    ["host", "mark-rebooted", HOST],
    ["host", "list"],
    ["host", "status", HOST],
    ["host", "assign", HOST, "inst-1"],
    ["host", "release", HOST, "inst-1"],
    ["host-rebooted", HOST],
    ["approve", HOST],
    ["rollout", "start", PCS, "--set", "prefill=img:2"],  # reads the PCS first: KUBECONFIG below
    ["rollout", "status", PCS],
    ["rollout", "pause", PCS],
    ["rollout", "resume", PCS],
    ["rollout", "abort", PCS],
    ["rollout", "rollback", PCS],
    ["rollout", "scale", PCS, "--replicas", "3"],
    ["campaign", "start", CAMPAIGN, "--hosts", HOST, "--reprovision"],
    ["campaign", "status", CAMPAIGN],
    ["campaign", "pause", CAMPAIGN],
    ["campaign", "abort", CAMPAIGN],
    ["campaign", "skip", CAMPAIGN, HOST],
    ["campaign", "limits", CAMPAIGN, "--batch-size", "2"],
    ["campaign", "list"],
    ["campaign", "schedule", CAMPAIGN, "--every", "12h", "--hosts", HOST, "--reprovision"],
    ["campaign", "schedule", "pause", CAMPAIGN],
    ["campaign", "schedules"],
]
QUEUE = ["--task-queue", f"gone-{uuid.uuid4()}"]
WITHOUT_QUEUE = {  # reads: no task queue to name
    ("host", "list"),
    ("host", "status"),
    ("campaign", "list"),
    ("campaign", "schedules"),
}


async def test_every_command_with_temporal_gone_mid_command_is_one_line_and_exit_3(
    client: Client, tmp_path: Path
) -> None:
    write_unreachable_site(tmp_path / "site.yaml", HOST)  # the host is known: the inventory check passes
    target = client.service_client.config.target_host

    proxies = [DyingServer(target) for _ in COMMANDS]
    rows = [
        (args if tuple(args[:2]) in WITHOUT_QUEUE else [*args, *QUEUE], await proxy.start())
        for args, proxy in zip(COMMANDS, proxies, strict=True)
    ]
    env = command_env(client, tmp_path) | {"METALFLOW_CONNECT_TIMEOUT": "0.5"}
    try:
        # `rollout start` reads the PodCliqueSet before it starts anything: a site serves it.
        (tmp_path / "grove").mkdir()
        with grove_site(tmp_path / "grove", INFERENCE, timings="zero") as sim:
            env["KUBECONFIG"] = str(sim.kubeconfig)
            outcomes = await run_in_few_processes(
                # a command's seconds are now its half-second window: few processes, each
                # started once (a start-up costs seconds on a loaded machine)
                [(argv, {"TEMPORAL_ADDRESS": address}) for argv, address in rows],
                env,
                per_process=11,
            )
    finally:
        for proxy in proxies:
            await proxy.close()
    results = [
        (args, code, out, err, proxy.cut)
        for args, proxy, (code, out, err) in zip(COMMANDS, proxies, outcomes, strict=True)
    ]
    problems = []
    for args, code, out, err, cut in results:
        lines = err.splitlines()
        shown = json.dumps(args)
        if not cut:
            problems.append(f"{shown}: never made a second call (exit {code}, {err!r})")
        elif code != 3 or len(lines) != 1 or "Traceback" in out + err:
            problems.append(f"{shown}: exit {code}, stdout {out[-300:]!r}, stderr {err[-600:]!r}")
        elif not lines[0].startswith("metalflow: lost Temporal at "):
            problems.append(f"{shown}: says {lines[0]!r}")
    assert problems == [], "\n".join(problems)
    assert not await entity_exists(client, HOST), "the cut came after a command created the entity"


async def test_a_temporal_back_within_the_default_window_is_reached_a_shorter_connect_timeout_is_not(
    client: Client, tmp_path: Path
) -> None:
    """`host status` with its Temporal gone for 2 s after it connected: the SDK's default window
    (10 s) retries until it is back and answers as without the restart; `--connect-timeout 0.5`
    says it lost Temporal."""
    write_unreachable_site(tmp_path / "site.yaml", HOST)
    target = client.service_client.config.target_host
    patient, hasty = RestartingServer(target, down=2.0), RestartingServer(target, down=2.0)
    status = ["host", "status", HOST]
    rows = [
        (status, {}),  # the answer without a restart
        (status, {"TEMPORAL_ADDRESS": await patient.start()}),
        ([*status, "--connect-timeout", "0.5"], {"TEMPORAL_ADDRESS": await hasty.start()}),
    ]
    try:
        direct, restarted, (code, _, err) = await run_in_few_processes(
            rows,
            command_env(client, tmp_path),
            per_process=3,  # one process: its start-up once
        )
    finally:
        await patient.close()
        await hasty.close()
    assert patient.cut and hasty.cut, "a command never made a second call"
    assert "lost Temporal" not in direct[2] + restarted[2], restarted
    assert restarted[:2] == direct[:2]
    assert code == 3 and err.splitlines()[-1].startswith("metalflow: lost Temporal at "), err
