"""The real built-in policy server (a child process), called with the real openai client and raw HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import openai
import pytest

from rl_daytona.agent import BASH_TOOL
from rl_daytona.policy import prior
from rl_daytona.policy import grammar as G
from rl_daytona.policy import vocab as V
from rl_daytona.policy.chat import encode_prompt
from rl_daytona.policy.model import PolicyModel
from rl_daytona.serving.launch import ServerProcess, start_builtin_server
from tests.policy.transcripts import CalcShell, Chat


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    handle = start_builtin_server()
    yield handle
    handle.close()
    assert handle.process.poll() is not None


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    c = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
    yield c
    c.close()


def _strict(raw: bytes) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")
    return json.loads(raw, parse_constant=refuse)


def _http(server: ServerProcess, path: str, body: bytes | None = None) -> tuple[int, Any]:
    url = (server.url if path.startswith("/chat") else server.url[: -len("/v1")]) + path
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, _strict(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _strict(exc.read())


def _create(client: openai.OpenAI, messages: list[dict[str, Any]], **kw: Any) -> Any:
    return client.chat.completions.create(model="builtin", messages=messages, tools=[BASH_TOOL], logprobs=True,
                                          extra_body={"return_token_ids": True}, **kw)


def _tokens(resp: Any) -> tuple[list[int], list[int], list[float]]:
    choice = resp.choices[0]
    return (resp.model_extra["prompt_token_ids"], choice.model_extra["token_ids"],
            [entry.logprob for entry in choice.logprobs.content])


def _first_tool_call(client: openai.OpenAI, messages: list[dict[str, Any]]) -> tuple[int, Any]:
    for seed in range(20):
        resp = _create(client, messages, seed=seed)
        if resp.choices[0].message.tool_calls:
            return seed, resp
    pytest.fail("no tool call in 20 seeds")


def _assistant(message: Any) -> dict[str, Any]:
    """The assistant message exactly as rl_daytona.agent echoes it back."""
    calls = [{"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
             for c in message.tool_calls]
    return {"role": "assistant", "content": message.content, "tool_calls": calls}


def test_a_first_turn_is_a_bash_call_with_vllm_token_fields(client: openai.OpenAI) -> None:
    messages = Chat().messages
    _, resp = _first_tool_call(client, messages)
    prompt_ids, ids, logprobs = _tokens(resp)
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and resp.system_fingerprint == "builtin-v0"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "bash" and call.id
    command = json.loads(call.function.arguments)["command"]
    assert G.parse_command(command) == tuple(ids) and G.is_complete(ids)
    assert prompt_ids == encode_prompt(messages)
    assert len(logprobs) == len(ids) and all(lp <= 0.0 for lp in logprobs)
    for token, entry in zip(ids, choice.logprobs.content):
        assert entry.token == V.token_text(token) and entry.bytes == V.token_bytes(token)
    assert resp.usage.prompt_tokens == len(prompt_ids) and resp.usage.completion_tokens == len(ids)
    # the logprobs are the model's own: the trainer recomputes exactly these
    seq, mask = prompt_ids + ids, [0] * len(prompt_ids) + [1] * len(ids)
    np.testing.assert_allclose(PolicyModel().sequence_logprobs(seq, mask)[len(prompt_ids):], logprobs,
                               rtol=0, atol=1e-9)


def test_the_same_seed_gives_the_same_completion(client: openai.OpenAI) -> None:
    messages = Chat().messages
    hot = 2.0 * prior.SHARPNESS  # the first command is nearly certain at temperature 1: flatten it
    runs = [_create(client, messages, seed=1234, temperature=hot) for _ in range(2)]
    (p1, ids1, lp1), (p2, ids2, lp2) = (_tokens(r) for r in runs)
    assert (p1, ids1, lp1) == (p2, ids2, lp2)
    messages_out = [r.choices[0].message for r in runs]
    said = [m.tool_calls[0].function.arguments if m.tool_calls else m.content for m in messages_out]
    assert said[0] == said[1]
    drawn = {tuple(_tokens(_create(client, messages, seed=s, temperature=hot))[1]) for s in range(8)}
    assert len(drawn) > 1


def test_a_second_turn_extends_the_first(client: openai.OpenAI, tmp_path: Path) -> None:
    shell, messages = CalcShell(tmp_path, 8), Chat().messages
    _, first = _first_tool_call(client, messages)
    prompt1, ids1, lps1 = _tokens(first)
    call = first.choices[0].message.tool_calls[0]
    output = shell.run(json.loads(call.function.arguments)["command"])
    messages += [_assistant(first.choices[0].message), {"role": "tool", "tool_call_id": call.id, "content": output}]
    second = _create(client, messages, seed=3)
    prompt2, ids2, lps2 = _tokens(second)
    assert prompt2[: len(prompt1) + len(ids1)] == prompt1 + ids1
    assert prompt2 == encode_prompt(messages) and G.is_complete(ids2)
    # a tool call id the server never issued maps to the same ids through the grammar
    foreign = [*messages[:-2], {**messages[-2], "tool_calls": [{**messages[-2]["tool_calls"][0], "id": "call_x"}]},
               {**messages[-1], "tool_call_id": "call_x"}]
    assert _tokens(_create(client, foreign, seed=3))[:2] == (prompt2, ids2)
    # both turns' logprobs are what the trainer recomputes on the whole sequence
    seq = prompt2 + ids2
    mask = [0] * len(seq)
    for start, n in ((len(prompt1), len(ids1)), (len(prompt2), len(ids2))):
        mask[start:start + n] = [1] * n
    recomputed = PolicyModel().sequence_logprobs(seq, mask)
    np.testing.assert_allclose(recomputed[np.asarray(mask) == 1], lps1 + lps2, rtol=0, atol=1e-9)


@pytest.mark.parametrize("body,param", [
    (b"{this is not json", None),
    (b"", None),
    (json.dumps({"model": "builtin"}).encode(), "messages"),
    (json.dumps({"model": "builtin", "messages": []}).encode(), "messages"),
    (json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}).encode(), None),
    (json.dumps({"messages": ["hi"]}).encode(), None),
    (json.dumps({"messages": [{"role": "user", "content": 5}]}).encode(), None),
    (json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": -2}).encode(), "temperature"),
])
def test_bad_requests_are_400_with_an_openai_error_and_the_server_goes_on(server: ServerProcess, body: bytes,
                                                                          param: str | None) -> None:
    status, error = _http(server, "/chat/completions", body)
    assert status == 400
    assert set(error) == {"error"} and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"] and error["error"]["param"] == param and error["error"]["code"] is None
    status, ok = _http(server, "/chat/completions", json.dumps({"messages": Chat().messages, "seed": 1}).encode())
    assert status == 200 and ok["choices"]
    assert _http(server, "/health") == (200, {"status": "ok", "version": 0})


@pytest.mark.parametrize("tool_calls", [[1], "call"])
def test_a_malformed_tool_call_is_a_400_not_a_server_error(server: ServerProcess, tool_calls: object) -> None:
    """BUG (chat.assistant_ids): an assistant message whose `tool_calls` is not a list of
    objects (e.g. `[1]` or a string) raises AttributeError on `call.get(...)` instead of
    ChatFormatError, so the server answers 500 "internal error" (which clients retry) rather
    than the documented 400 for a message list of the wrong shape."""
    messages = [*Chat().messages, {"role": "assistant", "content": None, "tool_calls": tool_calls}]
    status, error = _http(server, "/chat/completions", json.dumps({"messages": messages}).encode())
    assert (status, error["error"]["type"]) == (400, "invalid_request_error"), error


def test_the_openai_client_sees_a_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        _create(client, [{"role": "wizard", "content": "hi"}])
    assert info.value.status_code == 400 and "role" in str(info.value)
    assert _tokens(_create(client, Chat().messages, seed=1))[1]


def test_models_health_and_unknown_routes(server: ServerProcess, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == ["builtin"]
    status, models = _http(server, "/v1/models")
    assert status == 200 and models["object"] == "list" and models["data"][0]["object"] == "model"
    assert _http(server, "/health") == (200, {"status": "ok", "version": 0})
    status, error = _http(server, "/v1/nothing-here")
    assert status == 404 and error["error"]["type"] == "invalid_request_error"
    status, error = _http(server, "/v1/chat/completions")  # GET where only POST is served
    assert status == 405 and "error" in error


def test_several_choices_and_top_logprobs_over_the_wire(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(model="builtin", messages=Chat().messages, tools=[BASH_TOOL], n=3,
                                          logprobs=True, top_logprobs=2, temperature=2.0, seed=8,
                                          extra_body={"return_token_ids": True})
    assert len(resp.choices) == 3
    ids = set()
    for choice in resp.choices:
        tokens = choice.model_extra["token_ids"]
        assert G.is_complete(tokens) and len(choice.logprobs.content) == len(tokens)
        for entry in choice.logprobs.content:
            tops = [t.logprob for t in entry.top_logprobs]
            assert 1 <= len(tops) <= 2 and tops == sorted(tops, reverse=True)
        for call in choice.message.tool_calls or []:
            ids.add(call.id)
    assert len(ids) == sum(bool(c.message.tool_calls) for c in resp.choices)  # one fresh id per call
