"""The SSH gateway: ssh-access tokens from the real SDK, commands over real asyncssh."""

from __future__ import annotations

from pathlib import Path

import asyncssh
import pytest
from daytona import CreateSandboxFromSnapshotParams

from tests.daytona_sim.conftest import run, sim_and_client


def test_ssh_access_runs_commands_with_stdin_in_the_sandbox(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (sim, client):
            box = await client.create(CreateSandboxFromSnapshotParams(), timeout=60)
            await box.process.exec("echo from-toolbox > seen.txt")
            access = await box.create_ssh_access(expires_in_minutes=5)
            assert access.ssh_command == f"ssh -p {sim.ssh_port} {access.token}@{sim.ssh_host}"
            assert (await box.validate_ssh_access(access.token)).valid
            async with asyncssh.connect(sim.ssh_host, port=sim.ssh_port, username=access.token,
                                        known_hosts=None) as conn:
                piped = await conn.run("tr a-z A-Z; cat seen.txt; pwd", input="piped\n")
                assert (piped.stdout, piped.exit_status) == ("PIPED\nfrom-toolbox\n/workspace\n", 0)
                failed = await conn.run("echo bad >&2; exit 7", stdin=asyncssh.DEVNULL)
                assert (failed.stderr, failed.exit_status) == ("bad\n", 7)
                no_stdin = await conn.run("echo $((6*7))")
                assert no_stdin.stdout == "42\n"
    run(go())


def test_revoked_or_unknown_tokens_are_refused(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (sim, client):
            box = await client.create(CreateSandboxFromSnapshotParams(), timeout=60)
            access = await box.create_ssh_access()
            await box.revoke_ssh_access(access.token)
            assert not (await box.validate_ssh_access(access.token)).valid
            for username in (access.token, "not-a-token"):
                with pytest.raises(asyncssh.PermissionDenied):
                    async with asyncssh.connect(sim.ssh_host, port=sim.ssh_port, username=username,
                                                known_hosts=None, password="x"):
                        pass
            second = await box.create_ssh_access()
            await box.delete()
            with pytest.raises(asyncssh.PermissionDenied):
                async with asyncssh.connect(sim.ssh_host, port=sim.ssh_port, username=second.token,
                                            known_hosts=None):
                    pass
    run(go())
