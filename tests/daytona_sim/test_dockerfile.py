"""Dockerfile checks behind snapshot builds."""

from __future__ import annotations

import pytest

from rl_daytona.daytona_sim.dockerfile import DockerfileError, build_steps


def test_steps_fold_continuations_and_skip_comments() -> None:
    text = "# base\nARG V=3.11\nFROM python:${V}-slim\nRUN pip install \\\n    pytest\n\nCOPY . /app\n"
    assert build_steps(text) == ["ARG V=3.11", "FROM python:${V}-slim", "RUN pip install  pytest", "COPY . /app"]


@pytest.mark.parametrize(("text", "reason"), [
    ("", "empty"),
    ("RUN echo hi\n", "line 1: no FROM before RUN"),
    ("FROM python:3.11\nRUNN echo\n", "line 2: unknown instruction: RUNN"),
    ("ARG X=1\n", "no FROM instruction"),
])
def test_unbuildable_dockerfiles_name_the_problem(text: str, reason: str) -> None:
    with pytest.raises(DockerfileError, match=reason):
        build_steps(text)
