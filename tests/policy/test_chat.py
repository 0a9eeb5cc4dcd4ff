"""The chat template: prefix-stable prompts and assistant messages that map back to their ids."""

from __future__ import annotations

import pytest

from rl_daytona.policy import chat as C
from rl_daytona.policy import grammar as G
from rl_daytona.policy import vocab as V
from rl_daytona.policy.protocol import ChatRequest
from rl_daytona.policy.service import PolicyService
from tests.policy.conftest import Episode
from tests.policy.transcripts import tool_call_message


def test_prompts_are_prefix_stable_across_turns(episodes: list[Episode]) -> None:
    for episode in episodes:
        chat = episode.chat
        prompts = chat.prompts + [chat.prompt_ids()]
        assert len(prompts) >= 3
        for k, completion in enumerate(chat.completions):
            head = prompts[k] + list(completion)
            assert prompts[k + 1][: len(head)] == head, f"turn {k + 1} breaks the prefix"
            assert prompts[k][-1] == V.ASSISTANT


def test_memo_and_grammar_parse_give_the_same_prompt(episodes: list[Episode]) -> None:
    for episode in episodes:
        memo = C.CompletionMemo()
        assistant = [m for m in episode.chat.messages if m["role"] == "assistant"]
        for message, ids in zip(assistant, episode.chat.completions):
            if message.get("tool_calls"):
                memo.remember(message["tool_calls"][0]["id"], ids)
            assert C.assistant_ids(message, memo) == ids  # by the tool-call memo
            assert C.assistant_ids(message) == ids  # by the grammar's parse, no memo
        assert C.encode_prompt(episode.chat.messages, memo) == C.encode_prompt(episode.chat.messages)


def test_served_completions_map_back_from_the_messages_the_agent_echoes(episodes: list[Episode]) -> None:
    service = PolicyService()
    seen_edit = False
    for episode in episodes:
        for k, start in enumerate(episode.chat.turn_starts):
            messages = tuple(episode.chat.messages[:start])
            done = service.complete(ChatRequest(messages=messages, n=4, seed=k, temperature=1.5))
            assert list(done.prompt_ids) == episode.chat.prompts[k] == C.encode_prompt(messages)
            for choice in done.choices:
                if choice.command is None:
                    assert choice.token_ids == (V.SUBMIT,) and choice.content == C.SUBMIT_TEXT
                    message = {"role": "assistant", "content": choice.content}
                else:
                    assert choice.finish_reason == "tool_calls" and choice.command == G.render(choice.token_ids)
                    message = tool_call_message(choice.tool_call_id, choice.command)
                    seen_edit |= choice.token_ids[0] == G.EDIT_ID
                    foreign_id = tool_call_message("call_unknown", choice.command)
                    assert C.assistant_ids(foreign_id, service.memo) == choice.token_ids  # by parse
                assert C.assistant_ids(message, service.memo) == choice.token_ids  # by memo
                prompt = C.encode_prompt(list(messages) + [message], service.memo)
                assert prompt[: len(done.prompt_ids) + len(choice.token_ids) + 1] == \
                    list(done.prompt_ids) + list(choice.token_ids) + [V.ASSISTANT]
    assert seen_edit


def test_the_prompt_is_one_segment_per_message_then_the_generation_prompt() -> None:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                                   {"type": "text", "text": "é"}]},
                tool_call_message("c1", "cat calc.py"), {"role": "tool", "tool_call_id": "c1", "content": "out"},
                {"role": "assistant", "content": C.SUBMIT_TEXT}, {"role": "user", "content": None}]
    expected = ([V.SYSTEM, *V.encode_bytes("sys"), V.USER, *V.encode_bytes("aé"), V.ASSISTANT,
                 *G.parse_command("cat calc.py"), V.TOOL, *V.encode_bytes("out"), V.ASSISTANT, V.SUBMIT, V.USER,
                 V.ASSISTANT])
    assert C.encode_prompt(messages) == expected


def test_foreign_assistant_text_falls_back_to_bytes() -> None:
    assert C.assistant_ids({"role": "assistant", "content": "I think so"}) == tuple(V.encode_bytes("I think so"))
    foreign = tool_call_message("x", "ls -la")
    assert C.assistant_ids(foreign) == tuple(V.encode_bytes("ls -la"))
    raw = {"role": "assistant", "tool_calls": [{"id": "y", "function": {"name": "bash", "arguments": "cat calc.py"}}]}
    assert C.command_of_tool_call(raw["tool_calls"][0]) == "cat calc.py"  # arguments that are not JSON
    assert C.assistant_ids(raw) == G.parse_command("cat calc.py")
    parsed = {"id": "z", "function": {"name": "bash", "arguments": {"command": "nl -ba calc.py"}}}
    assert C.command_of_tool_call(parsed) == "nl -ba calc.py"


@pytest.mark.parametrize("messages", [
    [{"role": "developer", "content": "x"}],
    [{"role": "user", "content": "x"}, {"role": "function", "content": "y"}],
    [{"content": "no role"}],
    [{"role": "user", "content": {"not": "text"}}],
    ["just a string"],
    [],
    "not a list",
])
def test_messages_the_template_cannot_encode_are_chat_format_errors(messages: object) -> None:
    with pytest.raises(C.ChatFormatError):
        C.encode_prompt(messages)  # type: ignore[arg-type]


def test_the_memo_is_bounded_and_forgets_the_oldest() -> None:
    memo = C.CompletionMemo(capacity=2)
    memo.remember("a", [1])
    memo.remember("b", [2])
    memo.remember("c", [3])
    assert memo.get("a") is None and memo.get("b") == (2,) and memo.get("c") == (3,)


def test_a_cut_off_completion_keeps_the_prefix_property() -> None:
    """BUG (service.PolicyService._choice + chat.assistant_ids): a completion cut by max_tokens
    is answered as plain `content` (its rendered partial command) with no tool call; when the
    agent sends it back, `assistant_ids` re-encodes that text as byte tokens, so the next prompt
    does not start with prompt + the sampled completion ids (the agent then raises
    AgentError("...prefix...")). Only requests with max_tokens below a full command (~45
    pieces) are affected."""
    service = PolicyService()
    messages = [{"role": "user", "content": "fix calc.py"}]
    for seed in range(20):
        done = service.complete(ChatRequest(messages=tuple(messages), max_tokens=1, seed=seed))
        choice = done.choices[0]
        if choice.finish_reason == "length":
            break
    else:
        pytest.fail("no cut-off completion in 20 seeds")
    assert choice.command is None and len(choice.token_ids) == 1
    follow_up = messages + [{"role": "assistant", "content": choice.content}, {"role": "user", "content": "go on"}]
    prompt = C.encode_prompt(follow_up, service.memo)
    head = list(done.prompt_ids) + list(choice.token_ids)
    assert prompt[: len(head)] == head


def test_text_pieces_change_the_token_count_not_what_the_policy_sees(tmp_path) -> None:
    """The same transcript spelled in bytes only: the same observation, the same samples."""
    import numpy as np

    from rl_daytona.policy.model import PolicyModel
    from rl_daytona.policy.observe import observe
    from tests.policy.transcripts import CalcShell, Chat

    chat, shell = Chat(), CalcShell(tmp_path, 9)
    chat.run(V.LOOK_VERB, shell)
    chat.run("f=calc.py; sed -i '13s/ + / - /' \"$f\"" + V.EDIT_SUFFIXES[0], shell)
    ids = chat.prompt_ids()
    spelled = [b for t in ids for b in (V.encode_bytes(V.token_text(t)) if t >= V.TEXT_OFFSET else [t])]
    assert len(ids) < 0.75 * len(spelled) and any(t >= V.TEXT_OFFSET for t in ids)
    assert observe(ids) == observe(spelled)
    model = PolicyModel()
    for seed in range(5):
        assert model.sample(ids, np.random.default_rng(seed)) == model.sample(spelled, np.random.default_rng(seed))
