"""Starting the server child: serving a saved state, stopping it, and failing loudly."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import numpy as np
import openai
import pytest

from rl_daytona.agent import BASH_TOOL
from rl_daytona.serving.launch import ServerStartError, start_builtin_server
from rl_daytona.policy.model import PolicyModel
from tests.policy.transcripts import Chat


def test_a_saved_state_is_served_and_the_child_stops_with_the_block(tmp_path: Path) -> None:
    chat = Chat()
    prompt = chat.prompt_ids()
    model = PolicyModel()
    ids, _ = model.sample(prompt, np.random.default_rng(0))
    seq, mask = prompt + ids, [0] * len(prompt) + [1] * len(ids)
    for _ in range(3):
        grads = model.logprob_grads(seq, mask, mask)
        model.apply_adam({k: -g for k, g in grads.items()}, lr=0.1)
    model.save(tmp_path / "state")

    with start_builtin_server(state=tmp_path / "state", seed=5) as server:
        with urllib.request.urlopen(server.url[: -len("/v1")] + "/health", timeout=30) as resp:
            assert json.loads(resp.read()) == {"status": "ok", "version": 3}
        with openai.OpenAI(base_url=server.url, api_key="none", max_retries=0) as client:
            resp = client.chat.completions.create(model="builtin", messages=chat.messages, tools=[BASH_TOOL],
                                                  logprobs=True, seed=2, extra_body={"return_token_ids": True})
        assert resp.system_fingerprint == "builtin-v3"
        served_ids = resp.choices[0].model_extra["token_ids"]
        served = [e.logprob for e in resp.choices[0].logprobs.content]
        seq, mask = prompt + served_ids, [0] * len(prompt) + [1] * len(served_ids)
        loaded = PolicyModel.load(tmp_path / "state").sequence_logprobs(seq, mask)[len(prompt):]
        prior = PolicyModel().sequence_logprobs(seq, mask)[len(prompt):]
        np.testing.assert_allclose(served, loaded, rtol=0, atol=1e-9)
        assert not np.allclose(served, prior)  # the trained params, not the prior
        process = server.process
    assert process.poll() is not None
    server.close()  # closing twice is fine


def test_close_lets_the_child_exit_cleanly() -> None:
    """BUG (server.serve/_wait_stdin_eof with launch.ServerProcess.close): start_builtin_server
    always passes --stop-on-stdin-eof, whose stdin reader runs in the loop's default executor;
    on SIGTERM the server stops, but asyncio.run() then waits in shutdown_default_executor()
    for that thread, which stays blocked reading stdin because close() only closes the pipe
    after the wait. So the child never exits on SIGTERM: close() waits its whole timeout and
    SIGKILLs it (exit code -9), every time."""
    server = start_builtin_server()
    with urllib.request.urlopen(server.url[: -len("/v1")] + "/health", timeout=30) as resp:
        assert resp.status == 200  # serving, so its SIGTERM handler is installed
    server.close(timeout=3.0)
    assert server.process.returncode == 0, f"the child was killed (exit code {server.process.returncode})"


def test_a_child_that_cannot_start_is_a_server_start_error(tmp_path: Path) -> None:
    with pytest.raises(ServerStartError, match="did not start") as info:
        start_builtin_server(state=tmp_path / "missing", timeout=30)
    assert "missing" in str(info.value)
