"""What every renderer over a Hugging Face tokenizer shares: text <-> ids, stop tokens, Choice.

Invariant: a prompt is the template's text encoded in one call with `add_special_tokens=False`
(as `apply_chat_template(..., tokenize=True)` does), so special tokens written as text become
their ids; sampled ids are decoded without skipping anything, so a parse sees what was sampled.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rl_daytona.renderers.base import BASH_TOOL, ParsedMessage, RendererError, to_choice
from rl_daytona.serving.openai_chat import Choice


def token_id(tokenizer: Any, text: str) -> int | None:
    """The id of a single (special) token, or None when the vocabulary lacks it."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


class TokenizerRenderer:
    """Base of the template renderers: subclasses write `prompt_text`, `completion_text`, `parse_text`."""

    name = "tokenizer"
    stop_texts: tuple[str, ...] = ()
    generation_prefix = ""  # text the generation prompt ends with that the model continues from

    def __init__(self, tokenizer: Any, tools: Sequence[Mapping[str, Any]] = (BASH_TOOL,)) -> None:
        self.tokenizer = tokenizer
        self.tools = [dict(t) for t in tools]
        ids = [token_id(tokenizer, text) for text in self.stop_texts]
        self.stop: list[int] = [i for i in ids if i is not None]
        if not self.stop:
            raise RendererError(f"the tokenizer has none of {self.name}'s stop tokens {list(self.stop_texts)}; "
                                f"is it {self.name}'s tokenizer?")

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(tokens), skip_special_tokens=False,
                                         clean_up_tokenization_spaces=False))

    def prompt_text(self, messages: Sequence[Mapping[str, Any]]) -> str:
        raise NotImplementedError

    def completion_text(self, message: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def parse_text(self, text: str) -> ParsedMessage:
        raise NotImplementedError

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)) or not messages:
            raise RendererError("'messages' must be a non-empty list")
        if not all(isinstance(m, Mapping) for m in messages):
            raise RendererError("every message must be an object")
        return self.encode(self.prompt_text(messages))

    def completion_ids(self, message: Mapping[str, Any]) -> list[int]:
        """The ids a model emits for `message` right after the generation prompt (stop token included)."""
        return self.encode(self.completion_text(message))

    def parse(self, tokens: Sequence[int], stopped: bool = False) -> ParsedMessage:
        """`stopped`: the sampler says it stopped on a stop sequence it did not return."""
        ids = list(tokens)
        on_stop_token = bool(ids) and ids[-1] in self.stop
        text = self.generation_prefix + self.decode(ids[:-1] if on_stop_token else ids)
        if not (on_stop_token or stopped):
            return ParsedMessage(content=text, finished=False)
        return self.parse_text(text)

    def choice(self, tokens: Sequence[int], logprobs: Sequence[float], stop_reason: str) -> Choice:
        return to_choice(self.parse(tokens, stopped=stop_reason == "stop"), tokens, logprobs)
