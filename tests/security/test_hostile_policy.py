"""A hostile or broken policy in a real eval: Ray actors, real bwrap sandboxes, the real grader.

One `rl-daytona eval` run (in process) of the example task, its policy an OpenAI-compatible
endpoint that plays one script per conversation (tests/security/scripts.py): the honest fix,
every reward hack, every resource exhaustion, every malformed reply. Each rollout is
recognised by its script, and each category is checked: hacks earn 0, the fix earns 1,
exhaustion is stopped and marked while the rollout goes on to earn 1, malformed replies are
answered or marked agent_error, and the run records every rollout exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from rl_daytona.agent import FINAL_ANSWER_LIMIT
from rl_daytona.eval import EvalConfig, run_eval
from rl_daytona.types import SandboxLimits, Settings
from tests.fakes.scripted_llm import ScriptedAgents
from tests.security.scripts import EXHAUSTION, HACKS, MALFORMED_BAD, MALFORMED_OK, TEN_MB, all_scripts

TASKSET = "tests.tasks.example_task:EXAMPLE_TASKSET"
GROUP = 9  # 3 variants x 9 = 27 rollouts, two more than there are scripts: each script runs at least once
LIMITS = SandboxLimits(cpu_seconds=5, memory_mb=1024, max_processes=64, max_file_mb=8, max_output_bytes=64 * 1024,
                       workspace_mb=64)


@pytest.fixture(scope="module")
def run(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    scripts, names = all_scripts()
    out = tmp_path_factory.mktemp("hostile") / "run"
    with ScriptedAgents(scripts) as llm:
        summary = run_eval(EvalConfig(out=out, taskset=TASKSET, split="all", group=GROUP, max_concurrent=8,
                                      policy=llm.url, settings=Settings(max_turns=4, exec_timeout=8),
                                      limits=LIMITS))
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_name.setdefault(_script_name(r, names), []).append(r)
    yield {"summary": summary, "records": records, "by_name": by_name, "out": out, "opened": llm.opened}


def _script_name(record: dict[str, Any], names: dict[int, str]) -> str:
    """Which script a rollout played: its tool-call ids name it; a bare answer or an error tells the rest."""
    messages = record["trajectory"]["messages"]
    if len(messages) > 2:
        first = messages[2]
        if first.get("tool_calls"):
            return names[int(first["tool_calls"][0]["id"].split("_")[1][1:])]
        return "10 MB answer" if first["content"] else "empty answer"
    return next(name for name, (_, error) in MALFORMED_BAD.items() if error in record["error"])


def test_the_run_records_every_rollout_once_and_recognises_each_script(run: dict[str, Any]) -> None:
    records = run["records"]
    assert len(records) == run["summary"]["rollouts"] == 3 * GROUP == run["opened"]
    assert len({r["rollout_id"] for r in records}) == len(records)
    expected = {"control", *EXHAUSTION, *HACKS, *MALFORMED_OK, *MALFORMED_BAD}
    assert set(run["by_name"]) == expected, set(run["by_name"]) ^ expected
    assert not list((run["out"] / "sandboxes").glob("sb-*")), "every sandbox of the run was deleted"


def test_the_honest_fix_earns_one(run: dict[str, Any]) -> None:
    for r in run["by_name"]["control"]:
        assert (r["status"], r["reward"], r["tests_passed"]) == ("ok", 1.0, 3), r["error"]


@pytest.mark.parametrize("hack", list(HACKS))
def test_every_reward_hack_earns_zero(run: dict[str, Any], hack: str) -> None:
    for r in run["by_name"][hack]:
        tool = r["trajectory"]["messages"][3]["content"]
        assert tool.endswith("[exit code 0]"), tool  # the hack's files really were written
        assert (r["status"], r["reward"]) == ("ok", 0.0), (hack, r["error"])


@pytest.mark.parametrize("attack", list(EXHAUSTION))
def test_resource_exhaustion_is_stopped_marked_and_the_rollout_goes_on(run: dict[str, Any], attack: str) -> None:
    _, marks = EXHAUSTION[attack]
    for r in run["by_name"][attack]:
        result = r["trajectory"]["messages"][3]["content"]
        assert not result.endswith("[exit code 0]"), result[-300:]
        assert any(mark in result for mark in marks), (attack, result[-300:])
        # the next command ran in the same sandbox and the attempt was graded as usual
        assert (r["status"], r["reward"], r["trajectory"]["turns"]) == ("ok", 1.0, 3), (attack, r["error"])


@pytest.mark.parametrize("reply", list(MALFORMED_OK))
def test_a_malformed_reply_the_loop_can_answer_keeps_the_rollout_ok(run: dict[str, Any], reply: str) -> None:
    for r in run["by_name"][reply]:
        assert r["status"] == "ok" and r["reward"] == 0.0, r["error"]
        messages = r["trajectory"]["messages"]
        if reply == "10 MB answer":  # stored cut, say how much was cut
            assert len(messages[2]["content"]) < FINAL_ANSWER_LIMIT + 200 and "characters cut" in messages[2]["content"]
        elif reply != "empty answer":
            assert messages[3]["content"].startswith("error: "), messages[3]["content"][:200]
    if reply == "10 MB command":
        assert f"the command is {TEN_MB + 5} bytes" in run["by_name"][reply][0]["trajectory"]["messages"][3]["content"]


@pytest.mark.parametrize("reply", list(MALFORMED_BAD))
def test_a_reply_the_loop_cannot_use_is_an_agent_error_in_one_line(run: dict[str, Any], reply: str) -> None:
    for r in run["by_name"][reply]:
        assert r["status"] == "agent_error" and r["reward"] == 0.0
        assert MALFORMED_BAD[reply][1] in r["error"] and "\n" not in r["error"], r["error"]
        assert r["sandbox_id"], "a sandbox was claimed and released as usual"
