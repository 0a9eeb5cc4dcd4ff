"""Benchmarks (`rl-daytona bench`): sandbox supply and rollout throughput, figures not asserts.

Modules: spinup (time to usable for N sandboxes, by mode, through the real SandboxPool),
targets (local, a daytona-sim child process, or the latency model), model (that model as a
backend in virtual time), ladder (CSV and plot of a ladder), rollouts (rollouts/s, wall / CPU
floor, orchestration overhead per rollout), cli (the argparse subcommands).
"""
