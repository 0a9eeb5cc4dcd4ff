"""Any OpenAI-compatible server: vLLM's token ids kept exactly; a dead or wrong endpoint stops in one line."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from rl_daytona.chat_client import ChatClient
from rl_daytona.agent import run_agent
from rl_daytona.backends.local import LocalBackend
from rl_daytona.cli import main
from rl_daytona.endpoint_check import EndpointError, check_endpoint
from rl_daytona.learn.segments import SegmentedTokens
from rl_daytona.renderers import load_tokenizer
from rl_daytona.renderers.qwen3 import Qwen3Renderer
from rl_daytona.types import Settings
from tests.fakes.vllm_like import VLLMLike
from tests.renderers.tokenizer_folders import write_tokenizer_folder

REPLIES = [{"role": "assistant", "content": "<think>\nLook first.\n</think>\n\nListing.",
            "tool_calls": [{"id": "a", "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}]},
           {"role": "assistant", "content": "<think>\nSeen it — ✓\n</think>\n\nNothing to fix."}]


@pytest.fixture(scope="module")
def renderer(tmp_path_factory: pytest.TempPathFactory) -> Qwen3Renderer:
    folder = write_tokenizer_folder(tmp_path_factory.mktemp("tok") / "qwen3", "qwen3", "qwen3")
    return Qwen3Renderer(load_tokenizer(folder))


def _agent(url: str, tmp_path: Path) -> Any:
    async def go() -> Any:
        backend = LocalBackend(tmp_path / "sb")
        sandbox = await backend.create("vllm-like")
        client = ChatClient(url, max_retries=0)
        try:
            return await run_agent(client, backend, sandbox, "fix it", Settings(model="m", max_turns=4))
        finally:
            await client.close()
            await backend.delete(sandbox)

    return asyncio.run(go())


def test_a_vllm_shaped_server_s_token_ids_and_logprobs_are_kept_exactly(renderer: Qwen3Renderer, tmp_path: Path) -> None:
    with VLLMLike(renderer, REPLIES) as server:
        assert check_endpoint(server.url, "m", need_token_ids=True).token_ids is True
        server.served.clear()  # the probe's completion
        traj = _agent(server.url, tmp_path)
    expected = SegmentedTokens()
    for prompt, ids, logprobs in server.served:
        expected.add_turn(prompt, ids, logprobs)
    assert traj.finish_reason == "stop" and traj.turns == 2 and traj.segment_starts == ()
    assert (list(traj.token_ids), list(traj.logprobs), list(traj.loss_mask)) == (
        expected.token_ids, expected.logprobs, expected.loss_mask)
    sampled = [(t, lp) for _, ids, lps in server.served for t, lp in zip(ids, lps)]
    assert [(t, lp) for t, lp, m in zip(traj.token_ids, traj.logprobs, traj.loss_mask) if m] == sampled
    assert traj.messages[2]["content"] == "<think>\nLook first.\n</think>\n\nListing."  # thinking kept for history


def test_a_server_without_token_ids_evaluates_and_training_refuses_it(renderer: Qwen3Renderer, tmp_path: Path) -> None:
    with VLLMLike(renderer, REPLIES, token_ids=False) as server:
        traj = _agent(server.url, tmp_path)
        assert traj.finish_reason == "stop" and traj.token_ids == ()
        assert check_endpoint(server.url, "m").token_ids is None  # eval does not need them
        with pytest.raises(EndpointError, match="returns no token ids.*serve the model with vLLM"):
            check_endpoint(server.url, "m", need_token_ids=True)


def test_a_server_that_does_not_serve_the_model_says_what_it_serves(renderer: Qwen3Renderer) -> None:
    with VLLMLike(renderer, REPLIES, models=("Qwen/Qwen3-8B", "other")) as server:
        with pytest.raises(EndpointError, match=r"does not serve model 'm'; it serves: Qwen/Qwen3-8B, other"):
            check_endpoint(server.url, "m")


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_eval_against_a_dead_url_is_one_line_and_exit_2_before_anything_is_created(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["eval", "--policy", _dead_url(), "--model", "m", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and "does not answer" in err and "fix --policy" in err
    assert not (tmp_path / "run").exists()


def test_train_against_a_server_without_token_ids_refuses_before_anything_is_created(
        renderer: Qwen3Renderer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with VLLMLike(renderer, REPLIES, token_ids=False) as server:
        with pytest.raises(SystemExit) as info:
            main(["train", "--policy", server.url, "--model", "m", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and "training would learn nothing" in err
    assert not (tmp_path / "run").exists()
