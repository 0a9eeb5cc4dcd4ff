"""`rl-daytona tasks check --backend daytona`: the same check through the real daytona SDK and
asyncssh against daytona-sim (real bwrap sandboxes behind it), leaving no sandbox behind."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from rl_daytona.cli import main
from rl_daytona.daytona_sim import SimConfig, run_sim_in_thread
from rl_daytona.daytona_sim.catalog import DEFAULT_SNAPSHOT


def test_check_on_daytona_sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    key = f"sim-{secrets.token_hex(12)}"
    for name in ("DAYTONA_TARGET", "DAYTONA_SSH_GATEWAY", "DAYTONA_JWT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    config = SimConfig(root=str(tmp_path / "sim"), api_key=key, time_scale=0.02, seed=3)
    with run_sim_in_thread(config) as sim:
        monkeypatch.setenv("DAYTONA_API_KEY", key)
        monkeypatch.setenv("DAYTONA_API_URL", sim.api_url)
        with pytest.raises(SystemExit) as exit_:
            main(["tasks", "check", "tests.tasks.broken_tasks:PAIR", "--backend", "daytona",
                  "--snapshot", DEFAULT_SNAPSHOT, "--json", str(tmp_path / "check.json")])
        stats = sim.stats()
    out = capsys.readouterr().out
    found = {r["instance_id"]: r for r in json.loads((tmp_path / "check.json").read_text())}
    assert exit_.value.code == 1, out
    assert [r["verdict"] for r in found.values()] == ["ok", "broken"]
    assert found["unsolvable[variant=8]"]["problems"][0].startswith("reference solution pays 0.0")
    assert found["calc[variant=8]"]["grade_cpu_seconds"] > 0
    assert stats.created >= 4 and stats.alive == 0, "every sandbox the check made was deleted"
    assert key not in out
