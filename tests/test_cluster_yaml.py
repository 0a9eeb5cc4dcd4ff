"""cluster.yaml is a config `ray up` accepts: the launcher's own defaults and checks, then its schema.

`prepare_config` + `validate_config` are what `ray up` runs on the file before it talks to
the cloud (the provider's defaults merged in, then Ray's ray-schema.json through jsonschema and
the cross-field checks); the rest pins what this project needs from the file.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return yaml.safe_load((REPO / "cluster.yaml").read_text())


def test_the_launcher_accepts_it(config: dict[str, Any]) -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    assert prepared["head_node_type"] == "head" and prepared["max_workers"] >= 1


def test_it_matches_ray_s_autoscaler_schema_as_written(config: dict[str, Any]) -> None:
    import ray.autoscaler

    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(config, schema)


def test_a_head_and_a_rollout_worker_type_with_resources(config: dict[str, Any]) -> None:
    types = config["available_node_types"]
    assert set(types) == {"head", "rollout-worker"} and config["head_node_type"] == "head"
    worker = types["rollout-worker"]
    assert 1 <= worker["min_workers"] <= worker["max_workers"] <= config["max_workers"]
    for node_type in types.values():
        assert node_type["resources"]["CPU"] >= 1 and node_type["node_config"]["InstanceType"]
        assert "learner" not in node_type["resources"], "the head is home unless one chosen node offers `learner`"


def test_every_node_installs_this_project_and_starts_ray_with_the_secrets_file(config: dict[str, Any]) -> None:
    assert config["file_mounts"]["~/rl_daytona"] == "."
    assert any("pip install" in c and "-e ~/rl_daytona" in c for c in config["setup_commands"])
    assert ".venv" in config["rsync_exclude"]
    starts = " ".join(config["head_start_ray_commands"] + config["worker_start_ray_commands"])
    assert "ray start --head --port=6379" in starts and "ray start --address=$RAY_HEAD_IP:6379" in starts
    for command in (config["head_start_ray_commands"][-1], config["worker_start_ray_commands"][-1]):
        assert command.startswith("set -a && . ~/.rl_daytona.env && set +a"), "key and token reach Ray's processes"


def test_the_file_says_what_to_change() -> None:
    text = (REPO / "cluster.yaml").read_text()
    assert text.count("# CHANGE") >= 8
    for needed in ("DAYTONA_API_KEY", "RAY_AUTH_MODE=token", "RAY_AUTH_TOKEN", "--rollout-actors-per-node",
                   "ray job submit", "--backend daytona"):
        assert needed in text, needed
