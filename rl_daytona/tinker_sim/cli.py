"""`rl-daytona tinker-sim`: run the Tinker-compatible local service until SIGINT/SIGTERM.

Invariant: the command says it is a simulator, prints the base URL and the environment to
point the `tinker` SDK (or `rl-daytona train --trainer tinker`) at it, serves until SIGINT or
SIGTERM and exits 0. It never prints or logs a key. Bad flags exit 2 with one line.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

DESCRIPTION = (
    "tinker-sim is a SIMULATOR of Tinker's API for tests and local runs, like moto for AWS: it is not "
    "Tinker. It serves the HTTP calls the tinker SDK makes (sessions, create model, forward_backward, "
    "optim_step, save/load weights with tinker:// paths, sampling with logprobs, request futures) backed "
    "by rl_daytona's built-in numpy model; it serves only that model, named 'builtin'.")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("tinker-sim", help="run a local SIMULATOR of Tinker's API serving the built-in model",
                       description=DESCRIPTION)
    p.add_argument("--port", type=int, required=True, help="HTTP port (0: any free port)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--log", type=Path, default=None, help="append one JSON line per request (method, path, status, ms)")
    p.add_argument("--state-dir", type=Path, default=None, help="folder for checkpoints (default: a temp dir)")
    p.add_argument("--api-key", default=None, help="the only key to accept (default: any key starting with tml-)")


def run(args: argparse.Namespace) -> int:
    from rl_daytona.tinker_sim.server import SIM_API_KEY, SimConfig, serve

    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="tinker-sim-"))

    def ready(url: str) -> None:
        print(f"tinker-sim (a simulator, not Tinker) serving the built-in model 'builtin' at {url}; "
              f"checkpoints under {state_dir}", flush=True)
        print(f"TINKER_BASE_URL={url}", flush=True)
        print("TINKER_API_KEY=" + ("<the --api-key value>" if args.api_key else SIM_API_KEY), flush=True)
        print(f"train on it: rl-daytona train --trainer tinker --tinker-url {url} --base-model builtin", flush=True)
        if args.log:
            print(f"request log: {args.log}", flush=True)

    config = SimConfig(state_dir=state_dir, api_key=args.api_key, log_path=args.log)
    try:
        asyncio.run(serve(config, args.host, args.port, ready))
    except OSError as exc:  # e.g. the port is taken: one line, exit 2
        raise ValueError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    return 0
