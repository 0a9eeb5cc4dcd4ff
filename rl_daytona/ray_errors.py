"""Which Ray errors mean "the actor (or its node) is gone" rather than "the work failed".

Invariant: one definition, used by the fleet (re-dispatch a lost actor's rollouts) and by each
RolloutActor (retry a pool call the pool's restart cut off), so both agree on what a loss is.
"""

from __future__ import annotations


def lost_actor_errors() -> tuple[type[BaseException], ...]:
    """The errors that mean "the actor (or its node) is gone", not "the rollout failed"."""
    from ray.exceptions import (ActorUnschedulableError, NodeDiedError, ObjectLostError, RayActorError,
                                WorkerCrashedError)

    return RayActorError, ObjectLostError, NodeDiedError, WorkerCrashedError, ActorUnschedulableError
