"""A taskset that costs a couple of sandbox calls per rollout, for fault tests at full width.

Invariant: variant `v` seeds `todo.txt` and an empty `answer.txt`; the grade is 1.0 exactly when
`answer.txt` holds the word `done` (one file read, no pytest), so a rollout is: seed (one
write), the agent's commands, one read. Written only through the public task API. Run it with
`--taskset tests.reliability.cheap_task:CHEAP_TASKSET`.
"""

from __future__ import annotations

from typing import Any, AsyncGenerator

from rl_daytona.tasks import TaskEnv, Taskset, task

VARIANTS = 32
PROMPT = "Write the word done into answer.txt (see todo.txt)."
SOLVE = "echo done > answer.txt"


async def _note(env: TaskEnv, *, variant: int) -> AsyncGenerator[Any, Any]:
    """Write `done` into answer.txt."""
    await env.write_files({"todo.txt": f"task {variant}: write done into answer.txt\n", "answer.txt": ""})
    yield PROMPT
    answer = (await env.read_file("answer.txt")).decode(errors="replace").strip()
    yield 1.0 if answer == "done" else 0.0


note_task = task(name="note")(_note)

CHEAP_TASKSET = Taskset(
    name="note",
    instances=tuple(note_task(variant=v) for v in range(VARIANTS)),
    splits={"train": tuple(f"note[variant={v}]" for v in range(VARIANTS - 8)),
            "heldout": tuple(f"note[variant={v}]" for v in range(VARIANTS - 8, VARIANTS))},
)
