"""Which Python a LocalBackend sandbox sees: the host's prefixes bound where they are (under the
host's /tmp too), and the files of `PythonLayout.hidden` read as empty."""

from __future__ import annotations

import os
import site
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from rl_daytona.backends import bwrap as bw
from rl_daytona.backends import sandbox_support as ss
from rl_daytona.backends.local import LocalBackend
from tests.backends.test_local import _sandbox, backend, run  # noqa: F401 - `backend` is a fixture


def test_python_prefixes_under_tmp_and_elsewhere_are_bound(backend: LocalBackend, tmp_path: Path) -> None:
    """A Python under the host's /tmp (a CI clone) is bound on the sandbox's own /tmp; one
    elsewhere gets its mount point in a staged root of its own."""
    under_tmp = tmp_path / "clone" / ".venv"
    under_tmp.mkdir(parents=True)
    (under_tmp / "marker").write_text("tmp prefix\n")
    elsewhere = _outside_tmp() / "py"  # a fixed name: one staged root for it, however often run
    elsewhere.mkdir(parents=True, exist_ok=True)
    (elsewhere / "marker").write_text("other prefix\n")
    assert str(under_tmp).startswith("/tmp/") and not str(elsewhere).startswith("/tmp/")
    backend._python = replace(backend._python,
                              prefixes=(*backend._python.prefixes, str(under_tmp), str(elsewhere)))

    async def go() -> None:
        box = await _sandbox(backend)
        seen = await backend.exec(box, f"cat {under_tmp}/marker {elsewhere}/marker; touch /tmp/x && "
                                       f"echo writable; stat -c %a {under_tmp.parent} {elsewhere.parent}")
        assert seen.stdout.split() == ["tmp", "prefix", "other", "prefix", "writable", "755", "755"], seen
    run(go())


def test_hidden_files_read_empty_and_the_trainers_own_editable_finder_is_one(backend: LocalBackend,
                                                                            tmp_path: Path) -> None:
    """A file of the layout's `hidden` reads empty in a sandbox (the host file is untouched);
    the probe hides an editable install's .pth of rl_daytona itself (its finder would be
    imported by every Python start, for a package whose folder no sandbox sees)."""
    prefix = tmp_path / "venv"
    prefix.mkdir()
    pth = prefix / "__editable__.rl_daytona-0.1.0.pth"
    pth.write_text("import sys; print('finder loaded')\n")
    (prefix / "kept.pth").write_text("kept\n")
    backend._python = replace(backend._python, prefixes=(*backend._python.prefixes, str(prefix)),
                              hidden=(*backend._python.hidden, str(pth)))

    async def go() -> None:
        box = await _sandbox(backend)
        seen = await backend.exec(box, f"wc -c < {pth}; cat {prefix}/kept.pth")
        assert seen.stdout.split() == ["0", "kept"], seen
    run(go())
    assert pth.read_text().startswith("import sys")
    probed = bw.PythonLayout.probe(sys.executable)
    editable = sorted(str(p) for d in site.getsitepackages() for p in Path(d).glob("__editable__.rl_daytona-*.pth"))
    assert list(probed.hidden) == editable
    if editable:  # the clone's own setup (scripts/setup.sh) installs the project editable
        async def python_path() -> str:
            box = await _sandbox(backend)
            return (await backend.exec(box, "python -c 'import sys; print(sys.path)'")).stdout
        backend._python = probed
        assert "__editable__" not in run(python_path())


def _outside_tmp() -> Path:
    """A writable folder of this user's outside /tmp (the cache may live under /tmp)."""
    for base in (ss.cache_dir(), Path.home() / ".cache", Path("/var/tmp")):
        real = os.path.realpath(base)
        if real != "/tmp" and not real.startswith("/tmp/") and os.access(real, os.W_OK):
            return Path(real) / f"rl-daytona-test-prefix-{os.geteuid()}"
    pytest.skip("no writable folder outside /tmp")
