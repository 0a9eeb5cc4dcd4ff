"""The chat-completions wire format and the service behind it (no HTTP here; see test_server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rl_daytona.policy import prior
from rl_daytona.policy import grammar as G
from rl_daytona.policy import vocab as V
from rl_daytona.policy.chat import SUBMIT_TEXT, encode_prompt
from rl_daytona.policy.model import PolicyModel
from rl_daytona.policy.protocol import MAX_CHOICES, RequestError, completion_response, error_body, parse_request
from rl_daytona.policy.service import PolicyService
from tests.policy.transcripts import Chat

MESSAGES = Chat().messages


def _raw(**body: Any) -> bytes:
    return json.dumps({"messages": MESSAGES, **body}).encode()


def _strict(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_defaults() -> None:
    r = parse_request(_raw())
    assert (r.model, r.temperature, r.max_tokens, r.seed, r.n, r.logprobs, r.top_logprobs, r.return_token_ids) == \
        ("builtin", 1.0, 256, None, 1, False, 0, False)
    assert list(r.messages) == MESSAGES


def test_fields_are_read() -> None:
    r = parse_request(_raw(model="m", temperature=0.5, max_tokens=9, seed=-3, n=3, logprobs=True, top_logprobs=2,
                           return_token_ids=True))
    assert (r.model, r.temperature, r.max_tokens, r.seed, r.n, r.logprobs, r.top_logprobs, r.return_token_ids) == \
        ("m", 0.5, 9, -3, 3, True, 2, True)
    assert parse_request(_raw(max_completion_tokens=7)).max_tokens == 7


@pytest.mark.parametrize("raw,param", [
    (b"{not json", None),
    (b"\xff\xfe", None),
    (b"[1, 2]", None),
    (json.dumps({"model": "builtin"}).encode(), "messages"),
    (json.dumps({"messages": []}).encode(), "messages"),
    (json.dumps({"messages": "hi"}).encode(), "messages"),
    (_raw(temperature=-1), "temperature"),
    (_raw(temperature="hot"), "temperature"),
    (_raw(max_tokens=0), "max_tokens"),
    (_raw(max_tokens=2.5), "max_tokens"),
    (_raw(n=MAX_CHOICES + 1), "n"),
    (_raw(n=True), "n"),
    (_raw(top_logprobs=21), "top_logprobs"),
    (_raw(seed="7"), "seed"),
])
def test_bad_requests_are_request_errors(raw: bytes, param: str | None) -> None:
    with pytest.raises(RequestError) as info:
        parse_request(raw)
    assert info.value.param == param
    body = error_body(str(info.value), info.value.param)
    assert body == {"error": {"message": str(info.value), "type": "invalid_request_error", "param": param,
                              "code": None}}


def _respond(service: PolicyService, **body: Any) -> dict[str, Any]:
    request = parse_request(_raw(**body))
    done = service.complete(request)
    return completion_response(request, done.prompt_ids, done.choices, done.version)


def test_response_has_vllm_token_fields_and_openai_logprobs() -> None:
    service = PolicyService()
    out = _respond(service, logprobs=True, top_logprobs=3, return_token_ids=True, seed=1, n=4, temperature=2.0)
    assert out["object"] == "chat.completion" and out["system_fingerprint"] == "builtin-v0"
    assert out["prompt_token_ids"] == encode_prompt(MESSAGES)
    assert len(out["choices"]) == 4 and [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    total = 0
    for choice in out["choices"]:
        ids, content = choice["token_ids"], choice["logprobs"]["content"]
        total += len(ids)
        assert len(content) == len(ids) and G.is_complete(ids)
        for token, entry in zip(ids, content):
            assert entry["token"] == V.token_text(token) and entry["bytes"] == V.token_bytes(token)
            assert entry["logprob"] <= 0.0 and len(entry["top_logprobs"]) <= 3
        message = choice["message"]
        if ids == [V.SUBMIT]:
            assert choice["finish_reason"] == "stop" and message["content"] == SUBMIT_TEXT
            assert message["tool_calls"] is None
        else:
            assert choice["finish_reason"] == "tool_calls" and message["content"] is None
            (call,) = message["tool_calls"]
            assert call["type"] == "function" and call["function"]["name"] == "bash"
            command = json.loads(call["function"]["arguments"])["command"]
            assert G.parse_command(command) == tuple(ids) and service.memo.get(call["id"]) == tuple(ids)
    assert out["usage"] == {"prompt_tokens": len(out["prompt_token_ids"]), "completion_tokens": total,
                            "total_tokens": len(out["prompt_token_ids"]) + total}
    _strict(json.dumps(out))


def test_without_the_flags_there_are_no_token_fields() -> None:
    out = _respond(PolicyService(), seed=1)
    assert "prompt_token_ids" not in out and "token_ids" not in out["choices"][0]
    assert out["choices"][0]["logprobs"] is None


def test_the_version_is_the_models() -> None:
    out = _respond(PolicyService(PolicyModel(version=12)), seed=1)
    assert out["system_fingerprint"] == "builtin-v12"


def test_a_seed_fixes_the_completion_and_choices_differ() -> None:
    hot = 3.0 * prior.SHARPNESS  # the first command is nearly certain at temperature 1: flatten it
    a = PolicyService().complete(parse_request(_raw(seed=5, n=6, temperature=hot)))
    b = PolicyService().complete(parse_request(_raw(seed=5, n=6, temperature=hot)))
    assert [c.token_ids for c in a.choices] == [c.token_ids for c in b.choices]
    assert [c.logprobs for c in a.choices] == [c.logprobs for c in b.choices]
    assert len({c.token_ids for c in a.choices}) > 1  # every choice has its own stream


def test_a_seeded_service_answers_unseeded_requests_reproducibly() -> None:
    def run() -> list[tuple[int, ...]]:
        service = PolicyService(seed=11)
        return [service.complete(parse_request(_raw(temperature=3.0))).choices[0].token_ids for _ in range(5)]
    first = run()
    assert first == run() and len(set(first)) > 1


def test_a_cut_off_completion_is_plain_content_with_finish_reason_length() -> None:
    service = PolicyService()
    choices = [_respond(service, seed=seed, max_tokens=1, return_token_ids=True)["choices"][0] for seed in range(10)]
    cut = [c for c in choices if c["token_ids"] != [V.SUBMIT]]
    assert cut
    for choice in cut:
        assert choice["finish_reason"] == "length" and choice["message"]["tool_calls"] is None
        assert choice["message"]["content"] == G.render(choice["token_ids"]) and len(choice["token_ids"]) == 1


def test_greedy_responses_with_top_logprobs_are_valid_json() -> None:
    """BUG (model.PolicyModel._sampling_logprobs at temperature 0 + protocol._logprob_entry):
    greedy decoding gives every other candidate logprob -inf, and those go out as
    `top_logprobs` entries, which json.dumps writes as `-Infinity`, not valid JSON (RFC 8259;
    strict parsers such as JavaScript's JSON.parse reject the whole response). vLLM clamps
    such logprobs to -9999.0."""
    out = _respond(PolicyService(), temperature=0, logprobs=True, top_logprobs=3, seed=1)
    _strict(json.dumps(out))
