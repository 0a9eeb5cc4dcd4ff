"""The built-in model's renderer: `policy.chat.encode_prompt` in, the command grammar out.

Not part of the core: the registry (`renderers.registry`) reaches it by name only, so nothing
of the core imports the built-in model.

Invariant: a model sampled through Tinker whose vocabulary is the built-in one (the built-in
weights served by a Tinker-compatible sampler) renders exactly as the built-in server does, so
the trajectories it produces train the same way; tokens are named in the logprobs as the
built-in server names them. `parse`, `completion_ids` and `decode` are added for tests and `show`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Mapping, Sequence

from rl_daytona.policy import grammar as G
from rl_daytona.policy import vocab as V
from rl_daytona.policy.chat import SUBMIT_TEXT, CompletionMemo, assistant_ids, encode_prompt
from rl_daytona.policy.protocol import token_text
from rl_daytona.renderers.base import ParsedMessage, ToolCallText
from rl_daytona.serving.openai_chat import Choice
from rl_daytona.serving.sampler import SamplerError


class BuiltinRenderer:
    """The sampler's side of the built-in template (prompt ids, sampled ids -> a Choice)."""

    stop = None  # the grammar ends a command itself; a cut-off completion is stop_reason "length"
    token_text = staticmethod(token_text)

    def __init__(self) -> None:
        self.memo = CompletionMemo()

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        return encode_prompt(messages, self.memo)

    def choice(self, tokens: Sequence[int], logprobs: Sequence[float], stop_reason: str) -> Choice:
        ids, lps = tuple(int(t) for t in tokens), tuple(float(x) for x in logprobs)
        if len(lps) != len(ids):
            raise SamplerError(f"tinker returned {len(lps)} logprobs for {len(ids)} tokens")
        common = dict(token_ids=ids, logprobs=lps, top=tuple(() for _ in ids))
        if not ids or not G.is_complete(ids):
            return Choice(**common, command=None, content=G.render(ids) if ids else "", finish_reason="length")
        if ids[0] == V.SUBMIT:
            return Choice(**common, command=None, content=SUBMIT_TEXT, finish_reason="stop")
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        self.memo.remember(call_id, ids)
        return Choice(**common, command=G.render(ids), content=None, finish_reason="tool_calls", tool_call_id=call_id)


class BuiltinChatRenderer(BuiltinRenderer):
    """BuiltinRenderer under the renderer protocol (`renderers.base.Renderer`)."""

    name = "builtin"

    def completion_ids(self, message: Mapping[str, Any]) -> list[int]:
        return list(assistant_ids(message, self.memo))

    def decode(self, tokens: Sequence[int]) -> str:
        return "".join(V.token_text(int(t)) if 0 <= int(t) < V.VOCAB_SIZE else f"<{t}>" for t in tokens)

    def parse(self, tokens: Sequence[int]) -> ParsedMessage:
        choice = self.choice(tokens, [0.0] * len(tokens), "stop")
        if choice.command is None:
            return ParsedMessage(content=choice.content or "", finished=choice.finish_reason != "length")
        return ParsedMessage(content="", tool_calls=(ToolCallText("bash", choice.arguments or
                                                                  json.dumps({"command": choice.command})),))
