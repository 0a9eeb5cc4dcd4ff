"""`rl-daytona daytona-sim`: help, and a real subprocess served to the SDK then stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from daytona import AsyncDaytona, CreateSandboxFromSnapshotParams, DaytonaConfig

from rl_daytona.backends.local import LAYERS


def _cli(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rl_daytona.cli", *args], capture_output=True, text=True,
                          timeout=120, **kw)  # type: ignore[call-overload]


def test_help_says_it_is_a_simulator() -> None:
    out = _cli("daytona-sim", "--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "SIMULATOR" in text and "moto" in text and "--rate-limit" in text and "--time-scale" in text
    assert "daytona-sim" in _cli("--help").stdout


def test_bad_flags_and_a_taken_port_are_one_line_errors() -> None:
    bad = _cli("daytona-sim", "--port", "0", "--create-fail-rate", "2")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "between 0 and 1" in bad.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = _cli("daytona-sim", "--port", port, "--isolation", "none")
    assert busy.returncode == 2 and len(busy.stderr.strip().splitlines()) == 1 and "cannot listen" in busy.stderr


async def _create_and_exec(api_url: str) -> str:
    async with AsyncDaytona(DaytonaConfig(api_key="k-test", api_url=api_url)) as client:
        box = await client.create(CreateSandboxFromSnapshotParams(labels={"run": "cli"}), timeout=60)
        return (await box.process.exec("echo served")).result


def test_subprocess_serves_the_sdk_and_deletes_its_sandboxes_on_sigterm(tmp_path: Path) -> None:
    root = tmp_path / "root"
    proc = subprocess.Popen([sys.executable, "-m", "rl_daytona.cli", "daytona-sim", "--port", "0",
                             "--time-scale", "0.02", "--root", str(root), "--api-key", "k-test"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        api_url = None
        deadline = time.monotonic() + 120
        assert proc.stdout is not None
        banner: dict[str, str] = {}
        while "DAYTONA_SIM_CA_BUNDLE" not in banner and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"daytona-sim exited early: {proc.stderr.read() if proc.stderr else ''}"
            if line.startswith("DAYTONA_"):
                key, value = line.strip().split("=", 1)
                banner[key] = value
        api_url = banner.get("DAYTONA_API_URL")
        assert api_url is not None
        assert banner["DAYTONA_API_KEY"] == "<the --api-key value>"  # a chosen key is never printed
        assert Path(banner["DAYTONA_SIM_CA_BUNDLE"]).is_file()  # the variable --snapshot auto needs, by name
        assert asyncio.run(_create_and_exec(api_url)) == "served\n"
        assert [p for p in (root / "sandboxes").iterdir() if p.name != LAYERS]
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "deleted 1 sandboxes" in err and "k-test" not in _out + err
        assert [p for p in (root / "sandboxes").iterdir() if p.name != LAYERS and not p.name.startswith("_")] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
