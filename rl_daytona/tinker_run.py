"""The trainer a run uses: Tinker through its SDK — hosted, or the local Tinker-compatible service.

    target = TinkerTarget(url=None | "https://...", base_model="builtin", lora_rank=32, renderer="auto")
    check_target(target)                       # one ValueError line, before any sandbox exists
    with open_trainer(target, model_path=None) as trainer:
        trainer.url                            # the agents' OpenAI-compatible endpoint (SamplingClient behind it)
        trainer.training_client(resume, version)  # () -> TinkerTrainingClient, built inside the Learner

Invariant: a run has one training path and one sampling path, the `tinker` SDK's TrainingClient
and SamplingClient; hosted Tinker and the local service differ only in URL, key and model
name. Without a URL the local service (tinker-sim, the built-in model) runs as a child process
for the run, its checkpoints in one folder shared by every run on this machine
(`local_state_dir()`), so a `tinker://` path from one run resolves in the next, as on Tinker. A hosted URL without TINKER_API_KEY, a service
that does not answer, a base model it does not offer and an unknown renderer are each one
ValueError line. The key goes to the SDK only (never to a sandbox, log or run folder).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

BUILTIN = "builtin"
# The local Tinker-compatible service's key (tinker-sim takes it from here): the SDK wants a
# `tml-` key, and a user's TINKER_API_KEY never goes to a local service.
SIM_API_KEY = "tml-tinker-sim-local"
SIM_MODULE = "rl_daytona.tinker_sim.server"  # started by module name, as a separate service


@dataclass(frozen=True)
class TinkerTarget:
    url: str | None = None  # None: the local service for the built-in model, else hosted Tinker
    base_model: str = BUILTIN
    lora_rank: int = 32
    renderer: str = "auto"
    tokenizer: str | None = None  # a Hugging Face name or local folder (default: the base model's)

    @property
    def where(self) -> str:
        return self.url or "the local Tinker-compatible service"


def hosted_url() -> str:
    """Hosted Tinker's URL as the SDK resolves it (TINKER_BASE_URL, else the SDK's default)."""
    from tinker.lib.base_url import DEFAULT_BASE_URL

    return os.environ.get("TINKER_BASE_URL") or DEFAULT_BASE_URL


def with_default_url(target: TinkerTarget) -> TinkerTarget:
    """No URL: the local service for the built-in model, hosted Tinker for any other model."""
    if target.url is not None or target.base_model == BUILTIN:
        return target
    return replace(target, url=hosted_url())


def resolve_renderer(name: str, base_model: str) -> tuple[str, str]:
    """THE lookup of a renderer by name, without loading anything: (name, one line saying which
    and why); `auto` picks by model name; an unknown name is one ValueError line."""
    from rl_daytona.renderers import resolve_renderer as resolve

    return resolve(name, base_model)


def load_renderer(target: TinkerTarget) -> Any:
    """The run's renderer, its tokenizer loaded (--tokenizer, else the base model's name)."""
    from rl_daytona.renderers import pick_renderer

    renderer, _reason = pick_renderer(target.renderer, target.base_model, target.tokenizer)
    return renderer


def _get(url: str, key: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
    request = urllib.request.Request(url, headers={"X-API-Key": key} if key else {})
    with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - the user's service URL
        return json.loads(resp.read() or b"{}")


def api_key_for(target: TinkerTarget, is_sim: bool) -> str:
    """The local service started for the run: its own key (a user's Tinker key never goes to it).
    A URL: TINKER_API_KEY; for a tinker-sim at that URL, its own key when TINKER_API_KEY is unset."""
    if target.url is None:
        return SIM_API_KEY
    key = os.environ.get("TINKER_API_KEY") or ""
    if key or is_sim:
        return key or SIM_API_KEY
    raise ValueError(f"TINKER_API_KEY is not set: the Tinker service at {target.url} needs it "
                     "(export TINKER_API_KEY=tml-...)")


def check_target(target: TinkerTarget, announce: bool = True) -> str:
    """Check what can be checked before the run starts; the API key to use (URL None: the
    local service's). One ValueError line when the run cannot train there; once every check
    passed, `announce` prints which renderer a model other than the built-in one gets, and why."""
    _chosen, why = resolve_renderer(target.renderer, target.base_model)
    key = _check(target)
    if announce and target.base_model != BUILTIN:
        print(f"rl-daytona: {why}", file=sys.stderr, flush=True)
    return key


def _check(target: TinkerTarget) -> str:
    if target.lora_rank < 1:
        raise ValueError(f"--lora-rank must be at least 1, got {target.lora_rank}")
    hosted_by_default = target.url is None and target.base_model != BUILTIN
    target = with_default_url(target)
    if hosted_by_default:
        api_key_for(target, is_sim=False)  # hosted Tinker needs the key: say so before dialling it
    if target.url is None:
        return api_key_for(target, is_sim=True)
    base = target.url.rstrip("/")
    try:
        health = _get(f"{base}/api/v1/healthz", timeout=5.0)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ValueError(f"cannot reach the Tinker service at {target.url}: {getattr(exc, 'reason', exc)}") from None
    key = api_key_for(target, is_sim=health.get("service") == "tinker-sim")
    try:
        offered = [m.get("model_name") for m in _get(f"{base}/api/v1/get_server_capabilities", key)["supported_models"]]
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise ValueError(f"the Tinker service at {target.url} refused the key (HTTP {exc.code})") from None
        return key  # the model is checked when the training client is created
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return key
    if target.base_model not in offered:
        raise ValueError(f"base model {target.base_model!r} is not offered by {target.url} "
                         f"(it offers: {', '.join(str(m) for m in offered) or 'nothing'})")
    return key


class Trainer:
    """The run's Tinker connection: the sampling endpoint (`url`) and the training client factory."""

    def __init__(self, target: TinkerTarget, model_path: str | None = None) -> None:
        self.target, self._closers = target, []  # type: ignore[var-annotated]
        try:
            self._open(target, model_path)
        except BaseException:
            self.close()
            raise

    def _open(self, target: TinkerTarget, model_path: str | None) -> None:
        import tinker

        from rl_daytona.serving.sampler import SamplerServer, TinkerSamplingService

        target = self.target = with_default_url(target)
        self.key = check_target(target, announce=False)
        self.base_url = target.url
        if target.url is None:
            from rl_daytona.serving.launch import spawn_server

            sim = spawn_server(["-m", SIM_MODULE, "--port", "0",
                                "--state-dir", str(local_state_dir())],
                               None, 60.0, "the local Tinker-compatible service")
            self._closers.append(sim.close)
            self.base_url = sim.url
        self.service = tinker.ServiceClient(base_url=self.base_url, api_key=self.key)
        self._closers.append(lambda: self.service.close("success").result(30))
        if model_path is not None and not model_path.startswith("tinker://"):
            raise ValueError(f"--model-path {model_path!r} is not a tinker:// path")
        try:
            sampler = (self.service.create_sampling_client(model_path=model_path) if model_path
                       else self.service.create_sampling_client(base_model=target.base_model)).result()
        except Exception as exc:  # noqa: BLE001 - the SDK's many error types: one line
            raise ValueError(f"cannot sample {model_path or target.base_model} on {target.where}: "
                             f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from None
        make = functools.partial(_sampling_client, self.service)
        server = SamplerServer(TinkerSamplingService(sampler, load_renderer(target),
                                                     make_sampling_client=make), host=_host())
        self._closers.append(server.close)
        self.url = server.url

    def training_client(self, resume: str | None = None, version: int = 0) -> Callable[[], Any]:
        from rl_daytona.learn.clients import TinkerTrainingClient

        return functools.partial(TinkerTrainingClient.connect, self.base_url, self.key, self.target.base_model,
                                 self.target.lora_rank, resume, version)

    def close(self) -> None:
        while self._closers:
            try:
                self._closers.pop()()
            except Exception:  # noqa: BLE001 - closing the rest matters more
                pass

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sampling_client(service: Any, model_path: str) -> Any:
    return service.create_sampling_client(model_path=model_path)


def _host() -> str:
    import sys

    if "ray" in sys.modules:
        from rl_daytona.runtime import policy_host

        return policy_host()
    return "127.0.0.1"


def local_state_dir() -> Path:
    """Where the local Tinker-compatible service keeps checkpoints: one folder per machine (cache)."""
    from rl_daytona.backends.sandbox_support import cache_dir

    return cache_dir() / "tinker"


def open_trainer(target: TinkerTarget, model_path: str | None = None) -> Trainer:
    """The run's Tinker connection, sampling `model_path` (a tinker:// checkpoint) or the base model."""
    return Trainer(target, model_path)
