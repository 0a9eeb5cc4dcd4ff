"""Inside the sandbox: the first program of the grading child; it forks the worker, then grades.

Run by `grader_bootstrap` as `python -I -B rlgrade_start.py <config_fd> <report_fd> <meta>
<src> <home>`. It imports the grading programs from `meta`, takes `meta` off sys.path again,
makes a socketpair and forks: the child becomes the worker (`grader_worker.become_worker`:
only its end of the channel, the sources folder, a clean environment), the parent runs
`grader_runner.main` (the trusted pytest process) with the other end.

Invariant: the fork happens before the config pipe is read, so the worker's memory never held
the nonce, the pristine tests or the report descriptor's purpose; the worker closes every
descriptor but its channel before it runs anything. Forking instead of starting a second
interpreter saves its startup (~30 ms CPU per grading).
"""

import os
import socket
import sys


def main(argv: list[str]) -> int:
    meta, src, home = argv[3], argv[4], argv[5]
    sys.path.insert(0, meta)
    try:
        import rlgrade_imports  # noqa: F401 - the runner's boundary, imported while meta is on sys.path
        import rlgrade_runner
        import rlgrade_worker
    finally:
        sys.path.remove(meta)
    trusted, untrusted = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            trusted.close()
            rlgrade_worker.become_worker(untrusted, src, home)
        finally:
            os._exit(0)
    untrusted.close()
    return rlgrade_runner.main(argv[:3], trusted, pid)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
