"""Dockerfile checking for daytona-sim's snapshot builds (the image itself is not built).

Invariant: `build_steps` returns the instructions a build would run, in order, or raises
`DockerfileError` with one line naming the first problem: no FROM before the first
instruction other than ARG, or an instruction Docker does not know.
"""

from __future__ import annotations

INSTRUCTIONS = frozenset({
    "ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK", "LABEL",
    "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR",
})


class DockerfileError(ValueError):
    """The Dockerfile cannot be built; the message is the build's error reason."""


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(line number, instruction text) with comments, blanks and `\\` continuations folded."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, (pending + line).strip()))
        pending = ""
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def build_steps(text: str) -> list[str]:
    """The build's steps; `DockerfileError` for the first unbuildable line."""
    steps = logical_lines(text)
    if not steps:
        raise DockerfileError("Dockerfile is empty: it needs a FROM instruction")
    seen_from = False
    for number, step in steps:
        word = step.split(None, 1)[0].upper()
        if word not in INSTRUCTIONS:
            raise DockerfileError(f"Dockerfile line {number}: unknown instruction: {word}")
        if word == "FROM":
            seen_from = True
        elif word != "ARG" and not seen_from:
            raise DockerfileError(f"Dockerfile line {number}: no FROM before {word} "
                                  "(a Dockerfile must start with FROM)")
    if not seen_from:
        raise DockerfileError("Dockerfile has no FROM instruction")
    return [step for _, step in steps]
