"""The wire format knows no model: tokens are named by the caller's `token_text`, else vLLM's way."""

from __future__ import annotations

import json

import pytest

from rl_daytona.serving.openai_chat import (ChatFormatError, Choice, completion_response, message_text,
                                            parse_request)

REQUEST = parse_request(json.dumps({"messages": [{"role": "user", "content": "hi"}], "logprobs": True,
                                    "top_logprobs": 1, "return_token_ids": True}).encode())
CHOICE = Choice(token_ids=(3, 70000), logprobs=(-0.5, float("-inf")), top=(((3, -0.5),), ((9, -1.0),)),
                command="ls", content=None, finish_reason="tool_calls", tool_call_id="call_1")


def test_without_token_text_every_token_reads_token_id_n() -> None:
    out = completion_response(REQUEST, [1, 2], [CHOICE], version=4)
    content = out["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in content] == ["token_id:3", "token_id:70000"]
    assert content[1]["logprob"] == -9999.0 and content[1]["top_logprobs"][0]["token"] == "token_id:9"
    assert out["choices"][0]["token_ids"] == [3, 70000] and out["prompt_token_ids"] == [1, 2]
    assert json.loads(out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == {"command": "ls"}


def test_a_models_token_text_names_its_tokens_and_leaves_the_rest_to_vllms_convention() -> None:
    def names(token: int) -> tuple[str, list[int]] | None:
        return ("x", [120]) if token < 10 else None

    content = completion_response(REQUEST, [1], [CHOICE], 0, names)["choices"][0]["logprobs"]["content"]
    assert [(e["token"], e["bytes"]) for e in content] == [("x", [120]), ("token_id:70000", [])]


def test_message_text_reads_strings_parts_and_none_and_refuses_the_rest() -> None:
    assert message_text(None) == "" and message_text("a") == "a"
    assert message_text([{"type": "text", "text": "a"}, {"text": "b"}, "junk"]) == "ab"
    with pytest.raises(ChatFormatError, match="string or a list of parts"):
        message_text(3)
