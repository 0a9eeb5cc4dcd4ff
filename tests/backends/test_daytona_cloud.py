"""Against Daytona's real cloud: runs only when DAYTONA_API_KEY is set (skipped otherwise).

It creates one sandbox from the account's default snapshot with the run label, runs a command,
writes and reads a file, deletes it, and checks nothing with the run label is left. Costs a few
seconds of one small sandbox.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from rl_daytona.backends.daytona import DaytonaBackend
from rl_daytona.backends.daytona_options import DaytonaOptions

pytestmark = pytest.mark.skipif(
    not os.environ.get("DAYTONA_API_KEY") or "127.0.0.1" in os.environ.get("DAYTONA_API_URL", ""),
    reason="needs DAYTONA_API_KEY for Daytona's cloud (the sim tests cover this path offline)")


@pytest.mark.parametrize("transport", ["ssh", "toolbox"])
def test_one_sandbox_round_trip_on_the_cloud(transport: str) -> None:
    run_id = f"cloud-test-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        backend = DaytonaBackend(DaytonaOptions(transport=transport))
        try:
            box = await backend.create(run_id)
            try:
                assert (await backend.exec(box, "echo up")).stdout == "up\n"
                await backend.write_files(box, {"probe.txt": b"round trip"})
                assert await backend.read_file(box, "probe.txt") == b"round trip"
            finally:
                await backend.delete(box)
            assert await backend.list_sandboxes(run_id) == []
        finally:
            await backend.close()

    asyncio.run(asyncio.wait_for(go(), timeout=300))
