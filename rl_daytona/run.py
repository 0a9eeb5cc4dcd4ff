"""One run (eval or train), composed once from its config; `eval` and `train` are loops over it.

    with open_run(cfg, console, PolicySource(...)) as run:     # a frozen Run
        async with start_actors(run, demand) as actors:        # the pool and the fleet, started
            ... actors.fleet.run(request) ..., run.sink.add(rollout)
        backend_summary(run, actors)                           # after the block: what the pool used

Invariant: each part is resolved once, here, in this order: the taskset and every split the run
uses, the trainer check, the sandbox supply (backend spec, pool config), the Ray cluster, the
policy endpoint (and the training client factory), and only then the run folder and its sink.
So a run refused at any step before the folder leaves no folder behind, and a run that fails
with nothing recorded (no rollout, no metrics line, no sandbox in its ledger) removes the
folder it made. Whatever opened is closed when the block
ends, in reverse order; the pool is shut down (every sandbox of the run deleted) however
`start_actors`'s block ends.
"""

from __future__ import annotations

import shutil
import time
import uuid
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Mapping

from rich.console import Console

from rl_daytona.backends import BackendSpec
from rl_daytona.fleet import FleetPlan
from rl_daytona.pool import PoolConfig
from rl_daytona.sink import RolloutSink
from rl_daytona.types import Settings


@dataclass(frozen=True)
class PolicySource:
    """Where the run's agents sample (and, training, where it trains)."""

    url: str = "builtin"  # an OpenAI-compatible endpoint, or "builtin": the built-in policy server
    tinker: Any = None  # a tinker_run.TinkerTarget: sample (and train) through the tinker SDK instead
    model_path: str | None = None  # with `tinker`: a tinker:// checkpoint to sample (else its base model)
    train: bool = False  # build the training client factory too (from `resume` at `version`)
    resume: str | None = None
    version: int = 0
    server: Callable[[], Any] | None = None  # () -> a context manager whose value has `.url` (tests)
    training_client: Callable[[], Any] | None = None  # () -> TrainingClient; None: the trainer's


@dataclass(frozen=True)
class Run:
    """Everything a run's loop needs, resolved once."""

    run_id: str
    out: Path
    taskset: str  # its name: each RolloutActor loads the taskset by name in its own process
    tasks: Any  # the taskset, loaded once in the driver
    splits: Mapping[str | None, tuple[Any, ...]]  # every split the run uses -> its task instances
    spec: BackendSpec
    pool_config: PoolConfig
    plan: FleetPlan
    settings: Settings  # the agents' settings, `policy_url` the run's endpoint
    sink: RolloutSink
    console: Console
    training_client: Callable[[], Any] | None = None


def fleet_plan(cfg: Any) -> FleetPlan:
    """The FleetPlan of an eval or train config."""
    return FleetPlan(actors=cfg.rollout_actors, per_node=cfg.rollout_actors_per_node,
                     concurrency=cfg.rollout_concurrency, max_concurrent=cfg.max_concurrent,
                     rollout_deadline=cfg.settings.rollout_deadline)


def resolve_splits(taskset: str, splits: tuple[str | None, ...]) -> tuple[Any, dict[str | None, tuple[Any, ...]]]:
    """The taskset, loaded once by name, and each split's instances (a TaskError line when either fails)."""
    from rl_daytona.tasks import get_taskset

    loaded = get_taskset(taskset)
    return loaded, {split: tuple(loaded.split(split)) for split in splits}


@contextmanager
def open_run(cfg: Any, console: Console, policy: PolicySource, splits: tuple[str | None, ...],
             prepare: Callable[[], None] | None = None) -> Iterator[Run]:
    """Compose the run of an eval or train config (see the module docstring); `prepare()` readies
    the run folder (it exists then) before the sink opens `rollouts.jsonl` in it."""
    from rl_daytona import runtime
    from rl_daytona.supply import supply_for

    tasks, instances = resolve_splits(cfg.taskset, splits)
    if policy.server is None and policy.tinker is not None:
        from rl_daytona.tinker_run import check_target

        check_target(policy.tinker)  # a missing key, unreachable service, unknown model: before any sandbox
    run_id = cfg.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    spec, pool_config = supply_for(cfg, console.print)
    runtime.ensure_ray()
    sigterm_interrupts()
    made = not cfg.out.exists()
    with ExitStack() as stack:
        url, training = _open_endpoint(policy, stack)
        cfg.out.mkdir(parents=True, exist_ok=True)
        try:
            if prepare is not None:
                prepare()
            sink = RolloutSink(cfg.out / "rollouts.jsonl")
            stack.callback(sink.close)
            settings = Settings(**{**asdict(cfg.settings), "policy_url": url})
            yield Run(run_id, cfg.out, cfg.taskset, tasks, instances, spec, pool_config, fleet_plan(cfg),
                      settings, sink, console, training)
        except BaseException:
            stack.close()
            if made and _holds_nothing(cfg.out):  # no empty run folder
                shutil.rmtree(cfg.out, ignore_errors=True)
            raise


def _holds_nothing(folder: Path) -> bool:
    """Only empty files and folders in it: no rollout, metrics line or sandbox ledger entry (a
    run that made a sandbox keeps its ledger, for `rl-daytona reap`)."""
    return all(path.is_dir() or path.stat().st_size == 0 for path in folder.rglob("*"))


def _open_endpoint(policy: PolicySource, stack: ExitStack) -> tuple[str, Callable[[], Any] | None]:
    """(the agents' endpoint URL, the training client factory or None), opened on `stack`."""
    if policy.server is not None:
        return stack.enter_context(policy.server()).url, policy.training_client
    if policy.tinker is not None:
        from rl_daytona.tinker_run import open_trainer

        trainer = stack.enter_context(open_trainer(policy.tinker, policy.model_path))
        training = policy.training_client
        if policy.train and training is None:
            training = trainer.training_client(policy.resume, policy.version)
        return trainer.url, training
    if policy.url == "builtin":
        from rl_daytona.serving.launch import start_builtin_server

        return stack.enter_context(start_builtin_server()).url, None
    return policy.url, None


def sigterm_interrupts() -> None:
    """SIGTERM ends the run like Ctrl-C (the pool's shutdown deletes the run's sandboxes).

    Called after `ray.init`, which installs a handler of its own that exits at once."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)


@dataclass
class Actors:
    """The run's live actors (handles, not data): the pool, the fleet, and what the pool reported."""

    pool: Any
    fleet: Any = None
    reaped: int = 0  # orphans of earlier runs reaped when the pool started
    pool_stats: dict[str, Any] = field(default_factory=dict)  # set once the pool has shut down
    provider: dict[str, Any] = field(default_factory=dict)  # what the provisioner used (warm pool, forking)


@asynccontextmanager
async def start_actors(run: Run, demand: int = 0) -> AsyncIterator[Actors]:
    """The run's pool (asked for `demand` sandboxes at once when > 0) and its fleet, started;
    the fleet closed when the block ends well, the pool shut down however it ends."""
    from rl_daytona import runtime

    pool = runtime.start_pool(run.spec, run.run_id, run.pool_config)
    actors = Actors(pool)
    try:
        actors.reaped = await pool.start.remote()
        if demand:
            await pool.set_demand.remote(demand)
        actors.fleet = runtime.start_fleet(pool, run.spec, run.taskset, run.settings, run.plan, run.tasks)
        await actors.fleet.start()
        yield actors
        await actors.fleet.close()
    finally:
        actors.pool_stats = asdict(await pool.shutdown.remote())
    actors.provider = await pool.provider.remote()


def backend_summary(run: Run, actors: Actors) -> dict[str, Any]:
    """What summary.json records of the sandbox supply: backend, snapshot, transport, and what
    the provisioner used (forking, warm pool). No secret: the options hold none."""
    from rl_daytona.supply import describe

    return {**describe(run.spec), **actors.provider}
