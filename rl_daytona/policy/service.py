"""The policy behind the endpoint: one model, its tool-call memo and its random streams.

Invariant: a request with a `seed` is answered from `default_rng(seed)` alone, so the same
messages and seed give the same completion; without one, each request draws a fresh child
of the service's seed sequence. The model is only read here; swapping `service.model`
(a training API) changes the version every later response reports.
"""

from __future__ import annotations

import uuid

import numpy as np

from rl_daytona.policy import grammar as G
from rl_daytona.policy import vocab as V
from rl_daytona.policy.chat import SUBMIT_TEXT, CompletionMemo, encode_prompt
from rl_daytona.policy.model import PolicyModel, Sampled
from rl_daytona.policy.protocol import ChatRequest, Choice
from rl_daytona.serving.openai_chat import Completed


class PolicyService:
    """Turns validated chat requests into sampled choices."""

    def __init__(self, model: PolicyModel | None = None, seed: int | None = None) -> None:
        self.model = model if model is not None else PolicyModel()
        self.memo = CompletionMemo()
        self._seeds = np.random.SeedSequence(seed)

    def _rng(self, request: ChatRequest, index: int) -> np.random.Generator:
        if request.seed is not None:
            return np.random.default_rng([request.seed & ((1 << 64) - 1), index])
        return np.random.default_rng(self._seeds.spawn(1)[0])

    def complete(self, request: ChatRequest) -> Completed:
        """Sample `request.n` completions (raises ChatFormatError on bad messages)."""
        model = self.model
        version = model.version  # read before sampling: a step landing mid-request stamps the older one
        prompt = encode_prompt(request.messages, self.memo)
        choices = []
        for index in range(request.n):
            sampled = model.sample_detailed(prompt, self._rng(request, index), request.temperature,
                                            request.max_tokens, top_k=request.top_logprobs)
            choices.append(self._choice(sampled))
        return Completed(tuple(prompt), tuple(choices), version)

    def _choice(self, sampled: Sampled) -> Choice:
        ids = sampled.token_ids
        common = dict(token_ids=ids, logprobs=sampled.logprobs, top=sampled.top)
        if not sampled.finished:
            return Choice(**common, command=None, content=G.render(ids), finish_reason="length")
        if ids[0] == V.SUBMIT:
            return Choice(**common, command=None, content=SUBMIT_TEXT, finish_reason="stop")
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        self.memo.remember(call_id, ids)
        return Choice(**common, command=G.render(ids), content=None, finish_reason="tool_calls",
                      tool_call_id=call_id)
