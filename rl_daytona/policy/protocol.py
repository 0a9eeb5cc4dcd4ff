"""The OpenAI chat-completions wire format (`rl_daytona.serving.openai_chat`) as the built-in
policy writes it: each token's text and bytes in the logprobs come from the built-in vocabulary.

Invariant: the same shapes and errors as `serving.openai_chat`; only the tokens' names differ.
"""

from __future__ import annotations

from typing import Sequence

from rl_daytona.policy import vocab as V
from rl_daytona.serving import openai_chat
from rl_daytona.serving.openai_chat import (MAX_CHOICES, ChatRequest, Choice, RequestError,  # noqa: F401 - re-exported
                                            error_body, parse_request)


def token_text(token: int) -> tuple[str, list[int]] | None:
    """(text, bytes) of a built-in token; None for an id outside the vocabulary."""
    if 0 <= token < V.VOCAB_SIZE:
        return V.token_text(token), V.token_bytes(token)
    return None


def completion_response(request: ChatRequest, prompt_ids: Sequence[int], choices: Sequence[Choice],
                        version: int) -> dict:
    """`serving.openai_chat.completion_response`, tokens named by the built-in vocabulary."""
    return openai_chat.completion_response(request, prompt_ids, choices, version, token_text)
