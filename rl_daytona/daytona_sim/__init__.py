"""daytona-sim: a Daytona-compatible local server for tests and simulation (like moto for AWS).

It serves what the `daytona` SDK (0.226) calls — sandboxes (create, get, list by label,
delete, fork, ssh access), snapshots (Dockerfile builds with streamed logs), warm pools and
the toolbox process endpoint — with real LocalBackend sandboxes behind them and an asyncssh
gateway, delays from `latency.py` x `time_scale`, and fault hooks (`faults.py`): create
failures and hangs, broken sandboxes, a creation rate limit answered with 429.

Modules: latency (the model), state (records, stats), faults, dockerfile, catalog (snapshots,
warm pools), engine (sandbox lifecycle), rest and toolbox (HTTP routes), ssh, server, cli.
Forks need a 'linux-vm' sandbox: create from `VM_SNAPSHOT` or a snapshot built with
`sandbox_class=SandboxClass.LINUX_VM`.
"""

from rl_daytona.daytona_sim.catalog import DEFAULT_SNAPSHOT, VM_SNAPSHOT
from rl_daytona.daytona_sim.server import DaytonaSim, RunningSim, SimConfig, run_sim_in_thread
from rl_daytona.daytona_sim.state import SimStats

__all__ = ["DaytonaSim", "RunningSim", "SimConfig", "SimStats", "run_sim_in_thread",
           "DEFAULT_SNAPSHOT", "VM_SNAPSHOT"]
