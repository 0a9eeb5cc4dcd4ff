"""Preflight of an OpenAI-compatible policy endpoint, before any sandbox is created.

    check_endpoint("http://host:8000/v1", "Qwen/Qwen3-4B-Instruct-2507", need_token_ids=True)

Invariant: returns an `EndpointReport` or raises `EndpointError` (a ValueError: the CLI prints
it as one line and exits 2) saying what is wrong and how to fix it: the endpoint does not
answer, does not serve the named model (GET /v1/models lists what it does serve), or, when
training needs them, does not return the sampled token ids and logprobs (vLLM's
`return_token_ids`: `prompt_token_ids`, `choices[0].token_ids`, `logprobs.content[].logprob`).
Without them a trainer would "learn" from nothing; evaluation does not need them. The API key
(OPENAI_API_KEY) is sent as a bearer token and never appears in a message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx

from rl_daytona.agent import BASH_TOOL

PROBE = [{"role": "user", "content": "Reply with the word OK."}]


class EndpointError(ValueError):
    """The policy endpoint cannot be used (one line: what and how to fix it)."""


@dataclass(frozen=True)
class EndpointReport:
    url: str
    model: str
    models: tuple[str, ...]
    token_ids: bool | None  # None: not probed (evaluation does not need them)


def _request(client: httpx.Client, method: str, url: str, what: str, body: Any = None) -> Any:
    try:
        resp = client.request(method, url, json=body)
    except httpx.HTTPError as exc:
        raise EndpointError(f"policy endpoint {url} does not answer ({type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:120]}); start the server or fix --policy") from None
    if resp.status_code >= 400:
        raise EndpointError(f"policy endpoint {url} answered {what} with HTTP {resp.status_code}: "
                            f"{' '.join(resp.text.split())[:160]}")
    try:
        return resp.json()
    except ValueError:
        raise EndpointError(f"policy endpoint {url} answered {what} with something that is not JSON; "
                            "is --policy the server's /v1 base URL?") from None


def served_models(client: httpx.Client, base: str) -> tuple[str, ...]:
    body = _request(client, "GET", f"{base}/models", "GET /v1/models")
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise EndpointError(f"policy endpoint {base}/models did not list models ('data' missing); "
                            "is --policy the server's /v1 base URL?")
    return tuple(str(m.get("id")) for m in data if isinstance(m, dict))


def returns_token_ids(client: httpx.Client, base: str, model: str) -> bool:
    """One tiny completion: are the prompt ids, sampled ids and their logprobs all there?"""
    body = _request(client, "POST", f"{base}/chat/completions", "a probe chat completion", {
        "model": model, "messages": PROBE, "tools": [BASH_TOOL], "max_tokens": 4, "temperature": 0.0,
        "logprobs": True, "return_token_ids": True})
    choice = (body.get("choices") or [{}])[0] if isinstance(body, dict) else {}
    ids, lps = choice.get("token_ids"), ((choice.get("logprobs") or {}).get("content"))
    return (isinstance(body.get("prompt_token_ids"), list) and isinstance(ids, list) and isinstance(lps, list)
            and len(lps) == len(ids))


def check_endpoint(url: str, model: str, need_token_ids: bool = False, timeout: float = 15.0) -> EndpointReport:
    """Check `url` answers, serves `model`, and (if `need_token_ids`) returns token ids and logprobs."""
    base = url.rstrip("/")
    key = os.environ.get("OPENAI_API_KEY") or "none"
    with httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {key}"}) as client:
        models = served_models(client, base)
        if model not in models:
            shown = ", ".join(models[:10]) + (" ..." if len(models) > 10 else "") or "none"
            raise EndpointError(f"policy endpoint {base} does not serve model {model!r}; it serves: {shown} "
                                "(pass one with --model)")
        if not need_token_ids:
            return EndpointReport(base, model, models, None)
        if not returns_token_ids(client, base, model):
            raise EndpointError(
                f"policy endpoint {base} returns no token ids/logprobs for {model!r}, so training would learn "
                "nothing; serve the model with vLLM (it returns them when asked with return_token_ids) or "
                "train through Tinker; eval works against this endpoint as it is")
        return EndpointReport(base, model, models, True)


def preflight(policy: str, model: str, need_token_ids: bool) -> EndpointReport | None:
    """The CLI's check of `--policy URL --model M` (nothing to check for the built-in policy)."""
    if policy == "builtin":
        return None
    return check_endpoint(policy, model, need_token_ids=need_token_ids)
