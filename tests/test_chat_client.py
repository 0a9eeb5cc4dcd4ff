"""The agents' chat client against a real HTTP endpoint: retries, final errors, the key's header."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from rl_daytona.chat_client import ChatClient, ChatError
from tests.fakes.scripted_llm import Reply, ScriptedAgents, ScriptedLLM

BODY = {"model": "builtin", "messages": [{"role": "user", "content": "hi"}]}


def _complete(url: str, **kw: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        client = ChatClient(url, backoff=0.01, **kw)
        try:
            return await client.complete(BODY)
        finally:
            await client.close()

    return asyncio.run(go())


def test_a_reply_comes_back_as_the_servers_json_object() -> None:
    with ScriptedLLM([Reply(command="ls")]) as llm:
        reply = _complete(llm.url)
    assert reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"
    assert reply["prompt_token_ids"] == [7, 7] and llm.requests == [BODY]


def test_a_server_error_is_tried_again_and_then_answered() -> None:
    with ScriptedLLM([Reply(status=503), Reply(status=429), Reply(content="done")]) as llm:
        reply = _complete(llm.url, max_retries=2)
    assert reply["choices"][0]["message"]["content"] == "done" and len(llm.requests) == 3


def test_retries_run_out_with_the_servers_message_in_one_line() -> None:
    with ScriptedLLM([Reply(status=502)]) as llm:
        with pytest.raises(ChatError) as info:
            _complete(llm.url, max_retries=2)
    assert str(info.value) == "HTTP 502: scripted failure" and len(llm.requests) == 3


def test_a_bad_request_is_final_at_once() -> None:
    with ScriptedLLM([Reply(status=400), Reply(content="never")]) as llm:
        with pytest.raises(ChatError, match="^HTTP 400: scripted failure$"):
            _complete(llm.url, max_retries=2)
    assert len(llm.requests) == 1


@pytest.mark.parametrize("raw, error", [("<html>502 Bad Gateway</html>", "the reply is not JSON"),
                                        ("[1, 2]", "the reply is a JSON list, not an object")])
def test_a_200_that_is_not_a_json_object_is_an_error(raw: str, error: str) -> None:
    with ScriptedLLM([Reply(raw_body=raw)]) as llm:
        with pytest.raises(ChatError, match=error):
            _complete(llm.url)


def test_nothing_listening_is_one_line_after_the_retries() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the client connects
    with pytest.raises(ChatError) as info:
        _complete(f"http://127.0.0.1:{port}/v1", max_retries=1)
    assert "ClientConnectorError" in str(info.value) and "\n" not in str(info.value)


def test_the_key_goes_in_the_authorization_header_only() -> None:
    with ScriptedAgents([[Reply(status=401)]]) as llm:
        _complete(llm.url, api_key="sk-secret-123")
    assert llm.authorizations == ["Bearer sk-secret-123"]


def test_the_key_never_appears_in_an_error() -> None:
    with ScriptedLLM([Reply(status=401)]) as llm:
        with pytest.raises(ChatError) as info:
            _complete(llm.url, api_key="sk-secret-123")
    assert "sk-secret-123" not in str(info.value) and str(info.value).startswith("HTTP 401")
