"""The host CPU of one agent turn on the quickstart's policy path, replaying a run's real chats.

    .venv/bin/python scripts/bench_host_path.py runs/quickstart/rollouts.jsonl [--turns 1500] [--concurrency 8]

This process opens the run's trainer exactly as `rl-daytona train` does (`open_trainer`: the
local Tinker-compatible service as a child process, the tinker SDK's SamplingClient, the
agents' OpenAI-compatible endpoint in front of it). A client child process then sends every
chat prefix that ended in a model turn in ROLLOUTS (the messages the agents really sent),
CONCURRENCY at a time, through the same POST the agent makes. No sandbox runs. Prints the CPU
of each of the three processes per turn: the endpoint + SDK (the driver's share of a run), the
service (the policy's sampling), the client (a RolloutActor's HTTP share).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rl_daytona.bench.rollouts import _own_cpu as _self_cpu, _proc_cpu
from rl_daytona.types import Settings


def _prefixes(path: Path, limit: int) -> list[list[dict]]:
    out: list[list[dict]] = []
    with path.open() as f:
        for line in f:
            messages = json.loads(line)["trajectory"]["messages"]
            out += [messages[:k] for k, m in enumerate(messages) if m.get("role") == "assistant"]
            if len(out) >= limit:
                return out[:limit]
    return out


async def _client(url: str, prefixes: list[list[dict]], concurrency: int, http: str) -> None:
    from rl_daytona.agent import BASH_TOOL
    from rl_daytona.chat_client import ChatClient

    settings = Settings()
    queue = list(reversed(prefixes))

    def body(messages: list[dict]) -> dict:
        return {"model": settings.model, "messages": messages, "tools": [BASH_TOOL], "temperature": settings.temperature,
                "max_tokens": settings.max_tokens, "logprobs": True, "return_token_ids": True}

    if http == "openai":  # the SDK's own POST, as the agent made it before ChatClient
        import openai
        from openai.types.chat import ChatCompletion

        sdk = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)

        async def post(messages: list[dict]) -> None:
            await sdk.post("/chat/completions", cast_to=ChatCompletion, body=body(messages))
    else:
        chat = ChatClient(url, max_connections=concurrency)

        async def post(messages: list[dict]) -> None:
            await chat.complete(body(messages))

    async def worker() -> None:
        while queue:
            await post(queue.pop())

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await (sdk.close() if http == "openai" else chat.close())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rollouts", type=Path)
    ap.add_argument("--turns", type=int, default=1500)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--http", choices=("aiohttp", "openai"), default="aiohttp",
                    help="the client's HTTP: the agent's ChatClient (aiohttp) or the openai SDK's POST")
    ap.add_argument("--client", help=argparse.SUPPRESS)  # the child: URL
    args = ap.parse_args()
    prefixes = _prefixes(args.rollouts, args.turns)
    if args.client:
        started = time.process_time()
        asyncio.run(_client(args.client, prefixes, args.concurrency, args.http))
        print(json.dumps({"cpu": time.process_time() - started}))
        return
    if not prefixes:
        sys.exit(f"bench_host_path: no model turns in {args.rollouts}")

    from rl_daytona.tinker_run import TinkerTarget, open_trainer

    with open_trainer(TinkerTarget()) as trainer:
        sim = next(p for p in Path("/proc").iterdir() if p.name.isdigit() and _is_child_sim(p))
        asyncio.run(_client(trainer.url, prefixes[:16], 4, args.http))  # warm: connections, first-call imports
        own0, sim0, wall0 = _self_cpu(), _proc_cpu(int(sim.name)), time.perf_counter()
        child = subprocess.run([sys.executable, __file__, str(args.rollouts), "--turns", str(args.turns),
                                "--concurrency", str(args.concurrency), "--http", args.http, "--client", trainer.url],
                               capture_output=True, text=True, check=True)
        own, sim_cpu, wall = _self_cpu() - own0, _proc_cpu(int(sim.name)) - sim0, time.perf_counter() - wall0
    client = json.loads(child.stdout.strip().splitlines()[-1])["cpu"]
    n = len(prefixes)
    print(f"{n} turns (from {args.rollouts}), concurrency {args.concurrency}, {wall:.1f} s wall")
    print(f"  endpoint + tinker SDK (driver) {1000 * own / n:6.2f} ms CPU per turn")
    print(f"  local Tinker service (policy)  {1000 * sim_cpu / n:6.2f} ms CPU per turn")
    print(f"  client (the agents' HTTP, {args.http:7s}) {1000 * client / n:6.2f} ms CPU per turn")


def _is_child_sim(proc: Path) -> bool:
    try:
        stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        return int(stat[1]) == os.getpid() and b"tinker_sim" in (proc / "cmdline").read_bytes()
    except OSError:
        return False


if __name__ == "__main__":
    main()
