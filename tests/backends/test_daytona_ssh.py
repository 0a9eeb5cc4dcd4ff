"""The pure pieces of the Daytona transports, run for real with the host's sh, coreutils and tar."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from rl_daytona.backends.base import BackendAuthError, SandboxError
from rl_daytona.backends.daytona_options import DaytonaOptions, api_key
from rl_daytona.backends.daytona_ssh import SshTarget, parse_ssh_command, tar_bytes, wrap
from rl_daytona.backends.daytona_toolbox import capture, split_capture


def _sh(line: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["sh", "-c", line], input=stdin, capture_output=True, timeout=30, check=False)


@pytest.mark.parametrize("command,token,override,target", [
    ("ssh -p 2222 tok123@ssh.app.daytona.io", "", None, SshTarget("ssh.app.daytona.io", 2222, "tok123")),
    ("ssh -p 2222 tok123@ssh.app.daytona.io", "tok123", None, SshTarget("ssh.app.daytona.io", 2222, "tok123")),
    ("ssh tok@127.0.0.1", "", None, SshTarget("127.0.0.1", 22, "tok")),
    ("ssh -p 2222 tok@far.example", "", "near.example:2200", SshTarget("near.example", 2200, "tok")),
])
def test_parse_ssh_command(command: str, token: str, override: str | None, target: SshTarget) -> None:
    assert parse_ssh_command(command, override, token) == target


def test_parse_ssh_command_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="host:port"):
        parse_ssh_command("ssh -p 1 t@h", "no-port-here")
    with pytest.raises(SandboxError, match="cannot read an SSH gateway"):
        parse_ssh_command("ssh")


def test_wrap_sets_cwd_and_env_and_quotes_everything(tmp_path: Path) -> None:
    (tmp_path / "odd dir").mkdir()
    line = wrap('pwd; printf "%s|%s" "$A" "$B"', cwd=str(tmp_path / "odd dir"), timeout=10,
                env={"A": "it's $HOME", "B": "a;b && c"})
    done = _sh(line)
    assert done.returncode == 0
    assert done.stdout.decode() == f"{tmp_path / 'odd dir'}\nit's $HOME|a;b && c"


def test_wrap_times_out_with_124_and_keeps_the_exit_code(tmp_path: Path) -> None:
    assert _sh(wrap("sleep 20", cwd=str(tmp_path), timeout=0.3, env=None)).returncode == 124
    assert _sh(wrap("exit 7", cwd=str(tmp_path), timeout=5, env=None)).returncode == 7
    assert _sh(wrap("cat", cwd=str(tmp_path), timeout=5, env=None), b"in").stdout == b"in"


def test_tar_bytes_puts_relative_paths_under_the_workspace(tmp_path: Path) -> None:
    blob = bytes(range(256))
    data = tar_bytes({"a.txt": "hé", "deep/er/b.bin": blob, "/etc/c.conf": b"x"})
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.getnames() == ["workspace/a.txt", "workspace/deep/er/b.bin", "etc/c.conf"]
    done = subprocess.run(["tar", "-x", "-o", "-f", "-", "-C", str(tmp_path)], input=data, check=True)
    assert done.returncode == 0
    assert (tmp_path / "workspace/a.txt").read_text() == "hé"
    assert (tmp_path / "workspace/deep/er/b.bin").read_bytes() == blob


def test_capture_keeps_stdout_stderr_and_exit_code_apart(tmp_path: Path) -> None:
    command = 'cat; printf "\\000\\377" ; echo " err" >&2; exit 5'
    done = _sh(capture(wrap(command, cwd=str(tmp_path), timeout=10, env=None), stdin=b"in put\n", cap=1000))
    assert done.returncode == 5
    assert split_capture(done.stdout.decode()) == (b"in put\n\x00\xff", b" err\n")


def test_capture_cuts_each_output_just_past_the_cap(tmp_path: Path) -> None:
    line = capture(wrap("head -c 5000 /dev/zero; head -c 10 /dev/zero >&2", cwd=str(tmp_path), timeout=10,
                        env=None), stdin=None, cap=100)
    out, err = split_capture(_sh(line).stdout.decode())
    assert (len(out), len(err)) == (101, 10)
    assert split_capture(_sh(capture("true", stdin=None, cap=10)).stdout.decode()) == (b"", b"")


def test_split_capture_refuses_anything_else() -> None:
    with pytest.raises(SandboxError, match="captured output"):
        split_capture("daytona: connection refused")


def test_options_validate_and_resolve_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="transport"):
        DaytonaOptions(transport="carrier-pigeon")
    with pytest.raises(ValueError, match="creates-per-minute"):
        DaytonaOptions(creates_per_minute=0)
    monkeypatch.setenv("DAYTONA_API_URL", "http://127.0.0.1:1/api")
    monkeypatch.setenv("DAYTONA_SSH_GATEWAY", "gw:22")
    resolved = DaytonaOptions(snapshot="s").resolved()
    assert (resolved.api_url, resolved.ssh_gateway) == ("http://127.0.0.1:1/api", "gw:22")
    assert DaytonaOptions(api_url="http://x/api").resolved().api_url == "http://x/api"
    assert "key" not in repr(resolved).lower()
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    with pytest.raises(BackendAuthError, match="DAYTONA_API_KEY is not set"):
        api_key()
