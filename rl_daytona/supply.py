"""The run's sandbox supply, resolved once in the driver: which backend, which snapshot, which ledger.

Invariant: what leaves this module (a `BackendSpec` and a `PoolConfig`) is complete and holds
no secret: the Daytona endpoint, target and snapshot name are resolved here (flags, else the
environment; `--snapshot auto` builds or reuses `Dockerfile.hud`'s content-named snapshot),
DAYTONA_API_KEY is checked to be present but never copied, and the pool's ledger is the run
folder's `sandboxes.jsonl`.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from rl_daytona.backends import BackendSpec, DaytonaOptions
from rl_daytona.pool import PoolConfig
from rl_daytona.types import SandboxLimits

AUTO_SNAPSHOT = "auto"
REPO_ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO_ROOT / "Dockerfile.hud"


def backend_spec(kind: str, out: Path, isolation: str, limits: SandboxLimits,
                 daytona: DaytonaOptions) -> BackendSpec:
    """The spec every actor of the run builds its backend from."""
    return BackendSpec(kind=kind, root=str(out / "sandboxes"), isolation=isolation, limits=limits,
                       daytona=daytona)


def pool_config(pool: PoolConfig, kind: str, out: Path, daytona: DaytonaOptions) -> PoolConfig:
    """The pool's config with the run's ledger; Daytona creates take seconds, so more in flight."""
    creating = daytona.max_creating if kind == "daytona" else pool.max_creating
    return replace(pool, ledger=str(out / "sandboxes.jsonl"), max_creating=creating)


def resolve_daytona(options: DaytonaOptions, on_log: Callable[[str], None] = print) -> DaytonaOptions:
    """Endpoint and target from the environment, the key checked, `auto` snapshot built or reused."""
    from rl_daytona.backends.daytona_options import api_key

    api_key()  # a missing key is a one-line error before anything starts
    options = options.resolved()
    if options.snapshot in ("", AUTO_SNAPSHOT):
        if not DOCKERFILE.is_file():
            raise ValueError(f"--snapshot auto builds {DOCKERFILE}, which is not there (run from a clone of the "
                             "repository, or pass --snapshot NAME of an existing snapshot)")
        options = replace(options, snapshot=asyncio.run(_ensure_snapshot(options, on_log)))
    return options


async def _ensure_snapshot(options: DaytonaOptions, on_log: Callable[[str], None]) -> str:
    from daytona import AsyncDaytona, DaytonaConfig

    from rl_daytona.backends.daytona_options import api_key

    config = DaytonaConfig(api_key=api_key(), api_url=options.api_url, target=options.target or None)
    with _trusting_sim_storage():
        return await _build(AsyncDaytona(config), on_log)


async def _build(daytona: Any, on_log: Callable[[str], None]) -> str:
    from rl_daytona.backends.daytona_retry import FATAL, auth_error, classify
    from rl_daytona.backends.daytona_snapshot import ContextUploadTLSError, SnapshotBuildError, ensure_snapshot

    async with daytona as client:
        try:
            return await ensure_snapshot(client, REPO_ROOT, DOCKERFILE, on_log)
        except ContextUploadTLSError as exc:  # the upload's trust, not the Dockerfile: the message names the fix
            raise ValueError(str(exc)) from None
        except SnapshotBuildError as exc:  # one line naming the build's reason: exit 2, fix the Dockerfile
            raise ValueError(f"{exc} (fix {DOCKERFILE.name}, or pass --snapshot NAME)") from None
        except Exception as exc:  # noqa: BLE001 - a rejected key is one line; the rest propagate
            if classify(exc) == FATAL:
                raise auth_error(exc, "build or find the run's snapshot") from None
            raise


def _trusting_sim_storage() -> Any:
    """daytona-sim only: its object storage's CA (DAYTONA_SIM_CA_BUNDLE), else nothing changes."""
    import contextlib
    import os

    bundle = os.environ.get("DAYTONA_SIM_CA_BUNDLE")
    if not bundle:
        return contextlib.nullcontext()
    from rl_daytona.backends.ca_trust import trust_in_this_process

    return trust_in_this_process(Path(bundle))


def supply_for(cfg: Any, on_log: Callable[[str], None] = print) -> tuple[BackendSpec, PoolConfig]:
    """(spec, pool config) of an eval or train config (anything with the run's backend fields)."""
    daytona = resolve_daytona(cfg.daytona, on_log) if cfg.backend == "daytona" else cfg.daytona
    spec = backend_spec(cfg.backend, cfg.out, cfg.isolation, cfg.limits, daytona)
    return spec, pool_config(cfg.pool, cfg.backend, cfg.out, daytona)


def describe(spec: BackendSpec) -> dict[str, Any]:
    """What the summary records of the backend (no secret: the options hold none)."""
    if spec.kind != "daytona":
        return {"kind": spec.kind, "isolation": spec.isolation}
    d = spec.daytona
    return {"kind": "daytona", "api_url": d.api_url, "target": d.target, "snapshot": d.snapshot,
            "transport": d.transport, "creates_per_minute": d.creates_per_minute, "max_creating": d.max_creating}
