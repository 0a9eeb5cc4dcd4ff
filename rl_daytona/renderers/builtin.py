"""The built-in model's renderer (`policy.tinker_sampler.BuiltinRenderer`) under the renderer protocol.

Invariant: prompts, choices and stop behaviour are exactly BuiltinRenderer's (so the built-in
path trains as before); `parse`, `completion_ids` and `decode` are added for tests and `show`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rl_daytona.policy import vocab as V
from rl_daytona.policy.chat import assistant_ids
from rl_daytona.policy.tinker_sampler import BuiltinRenderer
from rl_daytona.renderers.base import ParsedMessage, ToolCallText


class BuiltinChatRenderer(BuiltinRenderer):
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
                                                                  _args(choice.command)),))


def _args(command: str) -> str:
    import json

    return json.dumps({"command": command})
