"""`rl-daytona tinker-sim`: the banner says it is a simulator and how to use it; it serves until SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path


def test_the_command_prints_its_url_serves_and_logs(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "rl_daytona.cli", "tinker-sim", "--port", "0", "--log", str(log),
                             "--state-dir", str(tmp_path / "state")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        banner = [proc.stdout.readline() for _ in range(5)]
        assert banner[0].startswith("tinker-sim (a simulator, not Tinker) serving the built-in model 'builtin'")
        url = banner[1].strip().removeprefix("TINKER_BASE_URL=")
        assert url.startswith("http://127.0.0.1:") and banner[2].startswith("TINKER_API_KEY=tml-")
        assert f"--tinker-url {url} --base-model builtin" in banner[3]
        with urllib.request.urlopen(f"{url}/api/v1/healthz", timeout=30) as resp:
            assert json.loads(resp.read())["status"] == "ok"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert json.loads(log.read_text().splitlines()[0]) | {"ms": 0} == {"method": "GET", "path": "/api/v1/healthz",
                                                                       "status": 200, "ms": 0}


def test_a_taken_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "rl_daytona.cli", "tinker-sim", "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith(f"rl-daytona tinker-sim: error: cannot listen on")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
