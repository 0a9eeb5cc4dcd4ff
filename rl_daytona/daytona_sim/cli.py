"""`rl-daytona daytona-sim`: run the simulated Daytona server until SIGINT/SIGTERM.

Invariant: the command prints the environment lines to point the SDK at it (the default key
"sim-key" is printed; a key given by --api-key is not, since it may be one a user reuses), serves until SIGINT or SIGTERM, and
deletes every sandbox it created before exiting 0. Bad flags exit 2 with one line.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
from pathlib import Path

DESCRIPTION = (
    "daytona-sim is a SIMULATOR of Daytona's API for tests and simulation, like moto for AWS: it is not "
    "Daytona. It serves the REST endpoints the daytona SDK calls (sandboxes, fork, ssh access, snapshots, "
    "warm pools, toolbox exec) with real local sandboxes behind them and an SSH gateway, and replays the "
    "published latency figures (2.8 s at 8 concurrent creates ... 9.9 s at 256; fork 0.66 s; warm claim "
    "~0.5 s), scaled by --time-scale, with injectable create failures and a rate limit (HTTP 429).")


DEFAULT_API_KEY = "sim-key"


def rate_limit(text: str) -> int:
    """'300/min' or '300' -> 300."""
    number = text[:-4] if text.endswith("/min") else text
    try:
        value = int(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N/min (e.g. 300/min), got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1/min, got {text!r}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("daytona-sim", help="run a local SIMULATOR of Daytona's API (for tests, like moto)",
                       description=DESCRIPTION)
    p.add_argument("--port", type=int, required=True, help="HTTP port (0: any free port)")
    p.add_argument("--ssh-port", type=int, default=0, help="SSH gateway port (default: any free port)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply every simulated delay (e.g. 0.05)")
    p.add_argument("--create-fail-rate", type=_fraction, default=0.0, help="fraction of creates ending in 'error'")
    p.add_argument("--create-hang-rate", type=_fraction, default=0.0, help="fraction of creates stuck in 'creating'")
    p.add_argument("--probe-fail-rate", type=_fraction, default=0.0, help="fraction of sandboxes whose commands fail")
    p.add_argument("--rate-limit", type=rate_limit, default=None, metavar="N/min", help="creates per minute (429 past it)")
    p.add_argument("--root", type=Path, default=None, help="folder for the local sandboxes (default: a temp dir)")
    p.add_argument("--api-key", default=DEFAULT_API_KEY,
                   help=f"the key clients must send (default {DEFAULT_API_KEY}, printed in the banner; "
                        f"a key you choose is not printed)")
    p.add_argument("--isolation", default="bwrap", choices=["bwrap", "none"], help="local sandbox isolation")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault and latency draws")


async def _serve(args: argparse.Namespace) -> None:
    from rl_daytona.daytona_sim.server import DaytonaSim, SimConfig

    root = args.root or Path(tempfile.mkdtemp(prefix="daytona-sim-"))
    config = SimConfig(root=str(root), api_key=args.api_key, time_scale=args.time_scale,
                       create_fail_rate=args.create_fail_rate, create_hang_rate=args.create_hang_rate,
                       probe_fail_rate=args.probe_fail_rate, rate_limit_per_min=args.rate_limit,
                       isolation=args.isolation, seed=args.seed)
    sim = DaytonaSim(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await sim.start(args.host, args.port, args.ssh_port)
    print(f"daytona-sim (a simulator, not Daytona) listening; sandboxes under {root}", flush=True)
    print(f"DAYTONA_API_URL={sim.api_url}", flush=True)
    shown_key = DEFAULT_API_KEY if args.api_key == DEFAULT_API_KEY else "<the --api-key value>"
    print(f"DAYTONA_API_KEY={shown_key}", flush=True)
    print(f"DAYTONA_SSH_GATEWAY={sim.ssh_host}:{sim.ssh_port}", flush=True)
    print(f"DAYTONA_SIM_CA_BUNDLE={sim.objects.ca_bundle}", flush=True)
    print(f"daytona-sim: export the lines above in the shell that runs rl-daytona; build contexts "
          f"(--snapshot auto) upload to {sim.objects.url}, whose certificate DAYTONA_SIM_CA_BUNDLE trusts", flush=True)
    try:
        await stop.wait()
    finally:
        stats = sim.stats()
        await sim.stop()
        print(f"daytona-sim: stopped; deleted {stats.alive} sandboxes still alive "
              f"(created {stats.created}, failed {stats.failed}, rate-limited {stats.rate_limited})",
              file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; 0 after a clean shutdown."""
    try:
        asyncio.run(_serve(args))
    except OSError as exc:  # e.g. the port is taken: one line, exit 2
        raise ValueError(f"cannot listen on {args.host}:{args.port}/{args.ssh_port}: {exc.strerror or exc}") from None
    return 0
