"""Old vs new quickstart policy path, per training step, in one process (no sandboxes).

    .venv/bin/python scripts/bench_tinker_path.py [--completions 400] [--concurrency 8] [--rounds 4]

old: the built-in chat server answers the agents directly and trains in-process (its
     `Trainer`, the code the removed home-made training routes ran, minus their HTTP: a lower bound)
new: the agents' endpoint asks the tinker SDK's SamplingClient, which asks the local
     Tinker-compatible service (child process); training through the SDK's TrainingClient

Sampling is measured in interleaved rounds (old, new, old, new, ...) at the rollouts'
concurrency, so both see the same machine load. Prints seconds per completion (wall, at that
concurrency) and per training step (forward_backward on one group of datums + optim_step +
save for sampler + save state), and the quickstart step's cost from both.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import openai

from rl_daytona.agent import BASH_TOOL, TokenTrajectory
from rl_daytona.learn.clients import AdamParams
from rl_daytona.learn.datum import Datum
from rl_daytona.learn.groups import group_datums
from rl_daytona.types import Trajectory
from tests.learn.builders import rollout_of

MESSAGES = [{"role": "system", "content": "You fix bugs in calc.py so that test_calc.py passes."},
            {"role": "user", "content": "The tests in test_calc.py fail. Fix calc.py."}]


async def _complete(client: openai.AsyncOpenAI, seed: int) -> tuple[float, Any]:
    started = time.perf_counter()
    resp = await client.chat.completions.create(model="builtin", messages=MESSAGES, tools=[BASH_TOOL], logprobs=True,
                                                seed=seed, extra_body={"return_token_ids": True}, max_tokens=256)
    return time.perf_counter() - started, resp


async def _round(url: str, n: int, concurrency: int, seed0: int) -> tuple[float, list[Any]]:
    """Wall seconds for n completions at `concurrency` in flight; the responses."""
    client = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0)
    gate, out = asyncio.Semaphore(concurrency), []

    async def one(i: int) -> None:
        async with gate:
            out.append((await _complete(client, seed0 + i))[1])

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    await client.close()
    return time.perf_counter() - started, out


def _datums(responses: list[Any]) -> list[Datum]:
    trajs = []
    for resp in responses[:8]:
        tokens = TokenTrajectory()
        choice = resp.choices[0]
        tokens.add_turn(resp.model_extra["prompt_token_ids"], choice.model_extra["token_ids"],
                        [c.logprob for c in choice.logprobs.content])
        trajs.append(Trajectory(token_ids=tuple(tokens.token_ids), logprobs=tuple(tokens.logprobs),
                                loss_mask=tuple(tokens.loss_mask), turns=1, finish_reason="stop"))
    members = [rollout_of(t, "g", i, float(i % 2)) for i, t in enumerate(trajs)]
    return group_datums(members)


def _old_train_step(datums: list[Datum], step: int) -> float:
    import tempfile

    from rl_daytona.policy.model import PolicyModel
    from rl_daytona.policy.training import Trainer, parse_adam, parse_datum

    trainer = _old_train_step.__dict__.setdefault("trainer", Trainer(PolicyModel()))
    started = time.perf_counter()
    trainer.forward_backward([parse_datum(d.to_wire(), i) for i, d in enumerate(datums)], "importance_sampling")
    trainer.optim_step(parse_adam({"learning_rate": 0.2}))
    trainer.save(f"{tempfile.gettempdir()}/bench-old-step-{step}")
    return time.perf_counter() - started


async def _new_train_step(client: Any, datums: list[Datum], step: int) -> float:
    started = time.perf_counter()
    await client.forward_backward(datums)
    await client.optim_step(AdamParams(learning_rate=0.2))  # + save_weights_for_sampler
    await client.save_state(f"bench-step-{step}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=400, help="completions per round")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each (interleaved)")
    args = parser.parse_args()
    from rl_daytona.serving.launch import start_builtin_server
    from rl_daytona.tinker_run import TinkerTarget, open_trainer

    with start_builtin_server(seed=0) as old, open_trainer(TinkerTarget()) as new:
        client = new.training_client()()
        asyncio.run(_round(old.url, 16, args.concurrency, 0))  # warm both
        asyncio.run(_round(new.url, 16, args.concurrency, 0))
        walls: dict[str, list[float]] = {"old": [], "new": []}
        train: dict[str, list[float]] = {"old": [], "new": []}
        responses: list[Any] = []
        for r in range(args.rounds):
            for name, url in (("old", old.url), ("new", new.url)):
                wall, responses = asyncio.run(_round(url, args.completions, args.concurrency, 1000 * r))
                walls[name].append(wall / args.completions)
            datums = _datums(responses)
            train["old"].append(_old_train_step(datums, r))
            train["new"].append(asyncio.run(_new_train_step(client, datums, r)))
        asyncio.run(client.close())
    for name in ("old", "new"):
        print(f"{name}: {statistics.median(walls[name]) * 1000:.2f} ms per completion at concurrency "
              f"{args.concurrency} (median of {args.rounds} rounds of {args.completions}; rounds "
              f"{', '.join(f'{w * 1000:.2f}' for w in walls[name])}), training step "
              f"{statistics.median(train[name]) * 1000:.0f} ms (8 datums)")
    per = statistics.median(walls["new"]) - statistics.median(walls["old"])
    step_train = statistics.median(train["new"]) - statistics.median(train["old"])
    print(f"new - old: {per * 1000:+.2f} ms per completion, {step_train * 1000:+.0f} ms per training step")


if __name__ == "__main__":
    main()
