"""A renderer behind the Tinker sampling endpoint: the real SDK types, the real openai client."""

from __future__ import annotations

import concurrent.futures
import json
import uuid
from typing import Any

import numpy as np
import openai
from tinker import types

from rl_daytona.agent import BASH_TOOL
from rl_daytona.serving.sampler import SamplerServer, TinkerSamplingService
from rl_daytona.renderers import pick_renderer


class ScriptedSampler:
    """`SamplingClient.sample` answering each call with the next scripted token sequence."""

    def __init__(self, sequences: list[list[int]]) -> None:
        self.sequences, self.calls = sequences, []  # type: ignore[var-annotated]

    def sample(self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams,
               **_: Any) -> concurrent.futures.Future:
        self.calls.append((prompt.to_ints(), sampling_params))
        tokens = self.sequences[min(len(self.calls) - 1, len(self.sequences) - 1)]
        seq = types.SampledSequence(stop_reason="stop", sequence_id=uuid.uuid4().hex,
                                    tokens_np=np.asarray(tokens, dtype=np.int32),
                                    logprobs_np=np.asarray([-0.25] * len(tokens), dtype=np.float32))
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(types.SampleResponse(sequences=[seq]))
        return future


def test_a_qwen3_renderer_serves_tinker_samples_as_tool_calls_with_thinking_kept(tokenizers: dict[str, Any]) -> None:
    renderer, _ = pick_renderer("auto", "Qwen/Qwen3-8B", tokenizers["qwen3"])
    reply = {"role": "assistant", "content": "<think>\nlist files\n</think>\n\nLooking.",
             "tool_calls": [{"function": {"name": "bash", "arguments": '{"command": "ls ✓"}'}}]}
    sampler = ScriptedSampler([renderer.completion_ids(reply), renderer.encode("Done.<|im_end|>")])
    messages = [{"role": "user", "content": "fix it"}]
    with SamplerServer(TinkerSamplingService(sampler, renderer)) as server:
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
        first = client.chat.completions.create(model="tinker", messages=messages, tools=[BASH_TOOL], logprobs=True,
                                               extra_body={"return_token_ids": True})
        message = first.choices[0].message
        assert message.content == "<think>\nlist files\n</think>\n\nLooking."
        assert json.loads(message.tool_calls[0].function.arguments) == {"command": "ls ✓"}
        assert first.choices[0].model_extra["token_ids"] == renderer.completion_ids(reply)
        assert [e.logprob for e in first.choices[0].logprobs.content] == [-0.25] * len(renderer.completion_ids(reply))
        assert sampler.calls[0][1].stop == renderer.stop
        history = [*messages, message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "calc.py"}]
        second = client.chat.completions.create(model="tinker", messages=history, tools=[BASH_TOOL], logprobs=True,
                                                extra_body={"return_token_ids": True})
    prompt1, prompt2 = sampler.calls[0][0], sampler.calls[1][0]
    assert prompt2[: len(prompt1) + len(renderer.completion_ids(reply))] == prompt1 + renderer.completion_ids(reply)
    assert second.choices[0].message.content == "Done." and second.choices[0].finish_reason == "stop"
