"""The agent loop against OpenAI-compatible endpoints that misbehave in scripted ways."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rl_daytona.chat_client import ChatClient
from rl_daytona.agent import (
    FINAL_ANSWER_LIMIT,
    MAX_COMMAND_BYTES,
    AgentError,
    TokenTrajectory,
    run_agent,
    truncate_output,
)
from rl_daytona.backends.local import LocalBackend
from rl_daytona.types import Settings
from tests.fakes.scripted_llm import Reply, ScriptedLLM


def _run(replies: list[Reply], tmp_path: Path, **settings: object) -> tuple[object, ScriptedLLM]:
    async def go(llm: ScriptedLLM) -> object:
        backend = LocalBackend(tmp_path / "sb")
        sandbox = await backend.create("agent-test")
        await backend.write_files(sandbox, {"hello.txt": "hi there\n"})
        client = ChatClient(llm.url, max_retries=0)
        try:
            return await run_agent(client, backend, sandbox, "say hi", Settings(**settings))  # type: ignore[arg-type]
        finally:
            await client.close()
            await backend.delete(sandbox)

    with ScriptedLLM(replies) as llm:
        return asyncio.run(go(llm)), llm


def test_tool_output_reaches_the_model_and_tokens_are_stored_once(tmp_path: Path) -> None:
    traj, llm = _run([Reply(command="cat hello.txt"), Reply(content="done")], tmp_path)
    tool_message = llm.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool" and "hi there" in tool_message["content"]
    assert "[exit code 0]" in tool_message["content"]
    assert llm.requests[0]["return_token_ids"] is True and llm.requests[0]["logprobs"] is True
    # turn 1: prompt [7,7] + sampled [1000]; turn 2: prompt grows by [7,7], sampled [1001]
    assert traj.token_ids == (7, 7, 1000, 7, 7, 1001)
    assert traj.loss_mask == (0, 0, 1, 0, 0, 1)
    assert traj.logprobs == (0.0, 0.0, -0.5, 0.0, 0.0, -0.5)
    assert traj.turns == 2 and traj.finish_reason == "stop" and traj.policy_version == 3


def test_broken_tool_json_is_answered_with_an_error_and_the_loop_goes_on(tmp_path: Path) -> None:
    traj, llm = _run([Reply(raw_arguments='{"command": "ls'), Reply(content="")], tmp_path)
    assert "not valid JSON" in llm.requests[1]["messages"][-1]["content"]
    assert traj.finish_reason == "stop"


def test_turn_limit_ends_the_loop(tmp_path: Path) -> None:
    traj, llm = _run([Reply(command="true")], tmp_path, max_turns=3)
    assert traj.turns == 3 and traj.finish_reason == "max_turns" and len(llm.requests) == 3


def test_huge_output_is_truncated_for_the_model(tmp_path: Path) -> None:
    traj, llm = _run([Reply(command="seq 1 200000"), Reply(content="ok")], tmp_path, output_limit=2000)
    content = llm.requests[1]["messages"][-1]["content"]
    assert len(content) < 2300 and "characters cut" in content


def test_a_prompt_that_does_not_extend_the_last_starts_a_new_segment_not_a_retokenisation(tmp_path: Path) -> None:
    """Templates re-render history (Qwen3 drops <think>): the next prompt is kept as sent, in a
    new segment, and every sampled id stays trained exactly once."""
    replies = [Reply(command="true"), Reply(content="x", prompt_token_ids=[9, 9, 9])]
    traj, _ = _run(replies, tmp_path)
    first = len(traj.token_ids) - 4  # the second segment: the 3 prompt ids + 1 sampled id
    assert traj.segment_starts == (first,) and list(traj.token_ids[first:]) == [9, 9, 9, 1001]
    assert list(traj.loss_mask[first:]) == [0, 0, 0, 1] and traj.sampled_tokens == 2


def test_endpoint_failure_is_an_agent_error(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="policy endpoint failed"):
        _run([Reply(status=500)], tmp_path)


def test_endpoint_without_token_ids_still_evaluates() -> None:
    tokens = TokenTrajectory()
    tokens.add_turn(None, None, [])
    assert tokens.available is False


def test_truncate_keeps_head_and_tail() -> None:
    text = "a" * 100 + "b" * 100
    cut = truncate_output(text, 50)
    assert cut.startswith("a" * 25) and cut.endswith("b" * 25) and "150 characters cut" in cut


def test_a_command_the_shell_could_never_run_is_answered_and_the_loop_goes_on(tmp_path: Path) -> None:
    """BUG (agent._run_tool): a 10 MB command (over Linux's 128 KiB per argv string) or one holding
    a NUL byte reached the backend, which could not start it: an OSError/ValueError that the
    RolloutActor marks infra_error, so the policy's own bad output was retried as a sandbox fault
    and its trajectory lost. Now the model is told, like for broken tool-call JSON."""
    big = "echo " + "B" * (10 * 1024 * 1024)
    traj, llm = _run([Reply(command=big), Reply(command="echo a\x00b"), Reply(command="echo ok"),
                      Reply(content="done")], tmp_path, max_turns=4)
    answers = [m["content"] for m in traj.messages if m["role"] == "tool"]
    assert answers[0] == f"error: the command is {len(big)} bytes; the limit is {MAX_COMMAND_BYTES} " \
                         "(write long text to a file in steps)"
    assert answers[1] == "error: the command holds a NUL byte, which no shell command can"
    assert answers[2] == "ok\n\n[exit code 0]" and traj.finish_reason == "stop" and traj.turns == 4


def test_a_command_that_hits_a_sandbox_limit_says_which(tmp_path: Path) -> None:
    traj, _ = _run([Reply(command="head -c 64M /dev/zero > big"), Reply(content="done")], tmp_path)
    tool = traj.messages[3]["content"]
    assert tool.endswith("(stopped by the sandbox's file_size limit)]"), tool


def test_a_huge_final_answer_is_stored_cut_with_its_tokens_whole(tmp_path: Path) -> None:
    traj, _ = _run([Reply(content="A" * (10 * 1024 * 1024), token_ids=[5, 6, 7])], tmp_path)
    stored = traj.messages[-1]["content"]
    assert len(stored) < FINAL_ANSWER_LIMIT + 100 and "characters cut" in stored
    assert traj.token_ids[-3:] == (5, 6, 7) and traj.finish_reason == "stop"


@pytest.mark.parametrize("reply, error", [
    (Reply(raw_body="<html>502 Bad Gateway</html>"), "policy endpoint failed: the reply is not JSON: Expecting value"),
    (Reply(message={"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]}),
     "malformed reply: TypeError: 'function' is missing, not an object"),
    (Reply(message={"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}]}),
     "malformed reply: TypeError: tool-call arguments are a dict, not a JSON string"),
    (Reply(message={"role": "assistant", "content": 42}), "malformed reply: TypeError: message content is a int"),
    (Reply(message={"role": "assistant", "content": None, "tool_calls": "ls"}),
     "malformed reply: TypeError: tool_calls is a str, not a list"),
])
def test_a_reply_the_loop_cannot_use_is_a_one_line_agent_error(tmp_path: Path, reply: Reply, error: str) -> None:
    """BUG (agent.run_agent): these raised AttributeError/TypeError/JSONDecodeError out of the loop,
    which the RolloutActor marks infra_error (a broken sandbox, retried, out of the baseline)."""
    with pytest.raises(AgentError) as info:
        _run([reply], tmp_path)
    assert error in str(info.value) and "\n" not in str(info.value), str(info.value)
