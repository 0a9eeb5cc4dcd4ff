"""A scripted OpenAI-compatible policy that answers each conversation by its own turn number.

`ScriptedLLM` replays one global list, fine for one rollout at a time; at 256 rollouts at once
each conversation needs its own script. Here the reply to a request is chosen by how many
assistant turns its messages already hold: turn 0 runs `commands[i % len(commands)]` (i counts
first turns, so a list like [solve, miss] gives groups with mixed rewards), later turns answer
in plain text, which ends the loop. Token ids keep the prefix property per conversation.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from aiohttp import web

from tests.fakes.scripted_llm import Reply, ScriptedLLM, _choice


class TurnLLM(ScriptedLLM):
    def __init__(self, commands: list[str], delay: float = 0.0) -> None:
        super().__init__([Reply(content="done")])
        self.commands, self.delay = commands, delay
        self._first_turns = itertools.count()
        self.served = 0

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.served += 1
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if self.delay:
            await asyncio.sleep(self.delay)
        reply = (Reply(command=self.commands[next(self._first_turns) % len(self.commands)]) if turn == 0
                 else Reply(content="done"))
        choice = _choice(reply, 1000 + turn)
        prompt = _prompt_ids(turn)
        return web.json_response({"id": f"cmpl-{self.served}", "object": "chat.completion", "created": 0,
                                  "model": body.get("model", "scripted"), "choices": [choice],
                                  "prompt_token_ids": prompt, "system_fingerprint": "scripted-v0"})


def _prompt_ids(turn: int) -> list[int]:
    """Turn k's prompt: every earlier turn's prompt piece and answer, then two fresh tokens."""
    ids: list[Any] = []
    for earlier in range(turn):
        ids += [7, 7, 2000 + earlier]
    return ids + [7, 7]
