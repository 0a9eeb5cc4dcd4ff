"""Real trajectories for the learning-side tests, and rollouts around them.

Trajectories are made the way the agent makes them: prompt ids from the real chat template,
completions sampled by the real `PolicyModel` (seeded), tool output from a real calc shell,
and the whole attempt stored once with its loss mask (`agent.TokenTrajectory`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from rl_daytona.agent import TokenTrajectory
from rl_daytona.policy import vocab as V
from rl_daytona.policy.model import PolicyModel
from rl_daytona.types import PhaseTimings, Rollout, RolloutStatus, Trajectory
from tests.policy.transcripts import CalcShell, Chat


def _trajectory(chat: Chat, tokens: TokenTrajectory, finish: str) -> Trajectory:
    return Trajectory(token_ids=tuple(tokens.token_ids), logprobs=tuple(tokens.logprobs),
                      loss_mask=tuple(tokens.loss_mask), messages=tuple(chat.messages),
                      turns=len(chat.completions), finish_reason=finish, policy_version=0)


def one_turn(model: PolicyModel, seed: int, temperature: float = 1.0) -> Trajectory:
    """A first turn on the fresh calc prompt (not executed: the attempt ends after it)."""
    chat, tokens = Chat(), TokenTrajectory()
    prompt = chat.prompt_ids()
    ids, lps = model.sample(prompt, np.random.default_rng(seed), temperature)
    tokens.add_turn(prompt, ids, lps)
    chat.prompts.append(prompt)
    chat.completions.append(tuple(ids))
    return _trajectory(chat, tokens, "max_turns")


def episode(root: Path, model: PolicyModel, variant: int, seed: int, turns: int) -> Trajectory:
    """A multi-turn attempt the policy drives on a real calc shell."""
    shell, chat, tokens = CalcShell(root, variant), Chat(), TokenTrajectory()
    rng = np.random.default_rng(seed)
    finish = "max_turns"
    for _ in range(turns):
        prompt = chat.prompt_ids()
        ids, lps = model.sample(prompt, rng)
        tokens.add_turn(prompt, ids, lps)
        chat.act(ids, shell)
        if ids == [V.SUBMIT]:
            finish = "stop"
            break
    return _trajectory(chat, tokens, finish)


def truncated(traj: Trajectory, length: int) -> Trajectory:
    """The first `length` tokens of a trajectory (a shorter attempt of the same shape)."""
    return dataclasses.replace(traj, token_ids=traj.token_ids[:length], logprobs=traj.logprobs[:length],
                               loss_mask=traj.loss_mask[:length])


def rollout_of(traj: Trajectory, group_id: str, attempt: int, reward: float,
               status: RolloutStatus = RolloutStatus.OK, version: int | None = None,
               rollout_id: str | None = None, task_id: str = "calc[variant=8]") -> Rollout:
    if version is not None:
        traj = dataclasses.replace(traj, policy_version=version)
    if status is RolloutStatus.INFRA_ERROR:
        traj = Trajectory(policy_version=traj.policy_version)  # a sandbox failure carries no tokens
    return Rollout(rollout_id=rollout_id or f"{group_id}/{attempt}", task_id=task_id,
                   variant=task_id.partition("=")[2].rstrip("]"), group_id=group_id, attempt=attempt,
                   reward=reward if status is RolloutStatus.OK else 0.0, status=status,
                   timings=PhaseTimings(), trajectory=traj,
                   error="sandbox died" if status is RolloutStatus.INFRA_ERROR else "")
