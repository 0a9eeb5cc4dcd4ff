"""Chat-template renderers: conversation + the `bash` tool -> prompt ids; sampled ids -> a tool call or a message.

Public API: `pick_renderer(name, model_name, tokenizer=None) -> (renderer, reason)`,
`resolve_renderer(name, model_name) -> (name, reason)`, `RENDERERS` (name -> what it is for),
`Renderer` / `ParsedMessage` (base), `load_tokenizer` (tokenizer), `TokenizerLoadError`.
"""

from rl_daytona.renderers.base import ParsedMessage, Renderer, RendererError, ToolCallText
from rl_daytona.renderers.registry import RENDERERS, pick_renderer, renderer_choices, resolve_renderer
from rl_daytona.renderers.tokenizer import TokenizerLoadError, load_tokenizer

__all__ = ["ParsedMessage", "Renderer", "RendererError", "ToolCallText", "RENDERERS", "pick_renderer",
           "renderer_choices", "resolve_renderer", "TokenizerLoadError", "load_tokenizer"]
