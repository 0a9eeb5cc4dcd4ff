"""The Taskset refuses what would silently go wrong later; a task's reference solution."""

from __future__ import annotations

import pytest

from rl_daytona.tasks import Solution, TaskError, Taskset, task
from rl_daytona.tasks.calc import calc_instance, calc_task, fixed_source, pristine_source


def test_duplicate_instances_are_refused_with_their_ids() -> None:
    with pytest.raises(TaskError, match=r"duplicate instances: 'calc\[variant=1\]' \(x3\)"):
        Taskset(name="d", instances=(calc_instance(1), calc_instance(2), calc_instance(1), calc_instance(1)))


@pytest.mark.parametrize(("splits", "message"), [
    ({"train": ("calc[variant=0]", "calc[variant=5]", "calc[variant=6]")},
     r"split 'train' names tasks it does not have: 'calc\[variant=5\]', 'calc\[variant=6\]'"),
    ({"train": "calc[variant=0]"}, r"split 'train' must be a tuple of instance ids, got str"),
    ({"all": ("calc[variant=0]",)}, r"a split may not be called 'all'"),
    (["calc[variant=0]"], r"splits must be a dict"),
])
def test_bad_splits_are_refused(splits: object, message: str) -> None:
    with pytest.raises(TaskError, match=message):
        Taskset(name="s", instances=(calc_instance(0),), splits=splits)  # type: ignore[arg-type]


def test_a_list_of_instances_and_instances_in_splits_are_accepted() -> None:
    inst = calc_instance(3)
    ts = Taskset(name="ok", instances=[inst], splits={"train": [inst]})  # type: ignore[arg-type,dict-item]
    assert ts.instances == (inst,) and ts.splits == {"train": ("calc[variant=3]",)}
    assert ts.split("train") == [inst]


def test_a_misspelt_keyword_names_the_right_one() -> None:
    with pytest.raises(TaskError, match=r"unexpected keyword argument 'varient'; did you mean 'variant'\?"):
        calc_task(varient=3)


def test_calc_reference_solution_reverts_every_catalogued_bug() -> None:
    for variant in (0, 8, 18, 31):
        solution = calc_instance(variant).solution()
        assert solution == Solution(files={"calc.py": fixed_source(variant)})
        assert fixed_source(variant) == pristine_source()


def test_a_solution_may_be_a_mapping_of_files_and_must_be_one_or_the_other() -> None:
    async def fn(env: object, *, n: int):  # type: ignore[no-untyped-def]
        yield "p"
        yield 0.0

    as_files = task(name="f", solution=lambda *, n: {"a.py": str(n)})(fn)
    assert as_files(n=2).solution() == Solution(files={"a.py": "2"})
    assert task(name="none")(fn)(n=1).solution() is None
    with pytest.raises(TaskError, match="its solution returned int"):
        task(name="bad", solution=lambda *, n: n)(fn)(n=1).solution()
