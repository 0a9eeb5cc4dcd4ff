"""A disk quota for one sandbox's writable layer, enforced from the host without privileges.

Invariant: when a command has ended, the layer it ran on (`upper`: the bind-mounted workspace,
or a fork's own overlay upper; the frozen layers a fork shares are never counted) is charged
at most `allowance = max(quota, its charge when the command started)`. A command that grows it
past the allowance is killed (`QuotaWatch.watch`) and its growth is taken back (`settle`), so
a sandbox can never end a command bigger than its quota, or than it was if the host seeded it
bigger (it can shrink). Unprivileged there is no hard limit to lean on (bwrap sizes only
tmpfs; loop mounts and project quotas need root), so while a command runs the layer can pass
the allowance by what it writes before the next scan (and a rollback leaves what it cannot
remove: a new directory holding whiteouts). Measured on this project's 2-core machine (ext4,
other jobs running; 16 MB quota, 20 runs each): single writers filling the workspace as fast
as they can (`head -c 1M`, `yes` or `dd` into new files in a shell loop, a Python loop writing
4 MB files) were stopped within 22 MB of the quota (median ~5 MB); eight `dd` loops at once
(more writers than cores: the watcher waits for a core) within 47 MB. The figure grows with
write speed and CPU contention. That transient is all the host's disk holds past the quota,
and it is gone when `exec` returns.

Charge: every entry under `upper`, the root itself excluded, by lstat: regular files and
symlinks `max(st_size, 512 * st_blocks, ENTRY_BYTES)` (preallocated blocks count),
directories `ENTRY_BYTES`, anything else (overlay whiteouts) `512 * st_blocks`; hard links
once per link. A block per entry at least, so a flood of empty files or directories is bounded
too, and with it what a scan costs (a watcher's scan stops once past the allowance). The walk
opens every directory relative to its parent with O_NOFOLLOW (a racing command cannot steer it
onto host files), opens up one the command shut (owner r-x, mode restored after), and does not
go below MAX_DEPTH: a directory that deep is charged DEEP_CHARGE, i.e. over any quota.

When to scan: one timer per event loop (`_Ticker`) looks every POLL_MIN at the free space of
the filesystem under each running watch (one statvfs) and wakes a watch once it dropped by half
that watch's headroom since its last scan (whoever wrote it: an extra scan is the only cost);
every watch also scans at least every POLL_MAX (growth hidden by others' deletes), never more
often than DUTY times its last scan's duration (at most 1/DUTY of a core per running command);
a scan that took over IN_LOOP_SCAN runs off the event loop next time. Measured here: a 21-entry
workspace scans in ~0.05 ms, 5,000 files in ~20 ms; watching one 5 s command costs ~50 ms of
CPU, twenty at once ~140 ms.

Rollback (`settle`, once the command's processes are dead), until the charge is within the
allowance: entries that did not exist when the command started are removed newest first (by
mtime at the filesystem's timestamp resolution, then inode number): files and symlinks, then
directories, deepest first (emptied ones; one past MAX_DEPTH with all it holds); then files
whose charge grew are cut back to their size at the start. Removing a copy-up from an overlay
upper brings back the lower layer's version; whiteouts are never removed (that would undelete
files). Two commands running at once in one sandbox share its allowance: one's rollback may
take back the other's new files.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import stat
import time
import weakref
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

ENTRY_BYTES = 4096
MAX_DEPTH = 64  # directories nested deeper are charged DEEP_CHARGE, not listed
DEEP_CHARGE = 1 << 40
POLL_MIN = 0.01  # seconds between two looks at the host filesystem's free space
POLL_MAX = 0.1  # seconds between two scans at most
TRIGGER_FLOOR = 256 * 1024  # a scan is due once free space dropped by max(headroom / 2, this)
DUTY = 20
IN_LOOP_SCAN = 0.002
_MB = 1024 * 1024
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Entry:
    """One entry of a layer as a scan saw it."""

    charge: int
    mtime_ns: int
    size: int
    kind: str  # "dir" | "file" (regular files and symlinks) | "other" (never removed)
    ino: int = 0

    @property
    def age(self) -> tuple[int, int]:
        """Sorts oldest first; inode numbers (allocated upwards) break mtime ties."""
        return self.mtime_ns, self.ino


def charge_of(st: os.stat_result, deep: bool = False) -> Entry:
    """What one lstat result costs against the quota (see the module docstring)."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        kind = "dir"
    else:
        kind = "file" if stat.S_ISREG(mode) or stat.S_ISLNK(mode) else "other"
    return Entry(DEEP_CHARGE if deep else _charge(st), st.st_mtime_ns, st.st_size, kind, st.st_ino)


def _charge(st: os.stat_result) -> int:
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        return ENTRY_BYTES
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return max(st.st_size, 512 * st.st_blocks, ENTRY_BYTES)
    return 512 * st.st_blocks


def walk(root: Path) -> Iterator[tuple[str, Entry]]:
    """(path relative to root, Entry) for everything under root; vanished entries skipped."""
    for path, st, deep in _entries(root):
        yield path, charge_of(st, deep)


INLINE_ENTRIES = 256  # a walk this short runs on the event loop (a thread hop costs more)


async def listed(root: Path) -> dict[str, Entry]:
    """`dict(walk(root))`, the first INLINE_ENTRIES entries on the event loop and the rest, if
    any, in a thread: a small workspace (most of them) costs no hand-off to a worker thread
    and back, which under a burst of commands made the loop wait for the GIL."""
    entries = walk(root)
    found = dict(itertools.islice(entries, INLINE_ENTRIES))
    if len(found) == INLINE_ENTRIES:
        found.update(await asyncio.to_thread(dict, entries))
    return found


def usage(root: Path, stop_above: int | None = None) -> int:
    """The layer's charge (what `walk` yields, summed); once past `stop_above` it stops and
    returns what it has (the watcher's hot path: no per-entry objects)."""
    total, limit = 0, (1 << 62) if stop_above is None else stop_above
    for _, st, deep in _entries(root):
        total += DEEP_CHARGE if deep else _charge(st)
        if total > limit:
            break
    return total


def _entries(root: Path) -> Iterator[tuple[str, os.stat_result, bool]]:
    """(relative path, lstat, too deep to list) of everything under root. Directories are
    opened relative to their parent with O_NOFOLLOW, so a command racing the walk cannot lead
    it through a symlink onto host files; at most MAX_DEPTH + 1 descriptors are open."""
    try:
        top = os.open(root, _DIR)
    except OSError:  # gone: nothing to charge
        return
    try:
        yield from _under(top, "", 1)
    finally:
        os.close(top)


def _under(fd: int, prefix: str, depth: int) -> Iterator[tuple[str, os.stat_result, bool]]:
    for name, st in _listing(fd):
        deep = stat.S_ISDIR(st.st_mode) and depth >= MAX_DEPTH
        yield prefix + name, st, deep
        if stat.S_ISDIR(st.st_mode) and not deep:
            opened = _open_dir(fd, name)
            if opened is not None:
                try:
                    yield from _under(opened[0], f"{prefix}{name}/", depth + 1)
                finally:
                    _close_dir(*opened)


def _listing(fd: int) -> list[tuple[str, os.stat_result]]:
    found = []
    with suppress(OSError), os.scandir(fd) as entries:
        for entry in entries:
            with suppress(OSError):
                found.append((entry.name, entry.stat(follow_symlinks=False)))
    return found


def _open_dir(parent: int, name: str) -> tuple[int, int | None] | None:
    """(fd, mode to restore or None) of a subdirectory, never through a symlink; one the
    command shut (not readable or searchable by its owner) is opened up for the walk."""
    try:
        return os.open(name, _DIR, dir_fd=parent), None
    except PermissionError:
        pass
    except OSError:  # gone, or swapped for a symlink or a file
        return None
    try:
        mode = _add_mode(parent, name, 0o500)
        return os.open(name, _DIR, dir_fd=parent), mode
    except OSError:
        return None


def _close_dir(fd: int, restore: int | None) -> None:
    if restore is not None:
        with suppress(OSError):
            os.chmod(f"/proc/self/fd/{fd}", restore)
    os.close(fd)


def _add_mode(parent: int, name: str, bits: int) -> int:
    """Add permission bits to the directory or file `name` (never a symlink); returns its old
    mode. As the sandbox's owner (not root) that is how we get into what a command shut."""
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        st = os.fstat(fd)
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            raise NotADirectoryError(name)
        os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | bits)  # an O_PATH fd: via /proc
        return stat.S_IMODE(st.st_mode)
    finally:
        os.close(fd)


def _free_bytes(path: Path) -> int:
    """Free bytes of the filesystem holding `path` (ext4, xfs: delayed allocations included)."""
    try:
        st = os.statvfs(path)
    except OSError:  # gone: the backstop scan will say so
        return 0
    return st.f_bfree * st.f_frsize


@dataclass(frozen=True)
class QuotaReport:
    """A command that left (or tried to leave) its layer over the allowance."""

    quota: int
    peak: int  # the most the layer was seen to hold (a floor: scans stop once over)
    final: int  # after rollback
    killed: bool  # stopped while running (False: it finished over the allowance)
    removed: tuple[str, ...]  # paths taken back, removals first, then truncations

    def message(self) -> str:
        shown = ", ".join(self.removed[:5]) + (f" (+{len(self.removed) - 5} more)"
                                                if len(self.removed) > 5 else "")
        how = "was stopped" if self.killed else "finished over it"
        return (f"rl-daytona: disk quota exceeded: /workspace reached {self.peak / _MB:.1f} MB of "
                f"its {self.quota / _MB:.0f} MB (workspace_mb); the command {how}, and what it "
                f"wrote past the quota was taken back ({shown or 'nothing to take back'}); "
                f"the workspace now holds {self.final / _MB:.1f} MB.\n")


class _Ticker:
    """One timer per event loop for all running watches: each POLL_MIN it looks at every watch
    (a statvfs, ~1 us) and wakes the ones whose scan is due; a loop wake-up costs far more."""

    def __init__(self) -> None:
        self.waiting: dict[int, tuple[QuotaWatch, asyncio.Future[None]]] = {}
        self.task: asyncio.Future[None] | None = None

    async def until_due(self, watch: QuotaWatch) -> None:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting[id(watch)] = (watch, ready)
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._tick())
        try:
            await ready
        finally:
            self.waiting.pop(id(watch), None)

    async def _tick(self) -> None:
        while self.waiting:
            await asyncio.sleep(POLL_MIN)
            now = time.monotonic()
            for watch, ready in list(self.waiting.values()):
                if not ready.done() and watch.due(now):
                    ready.set_result(None)


_TICKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Ticker] = (
    weakref.WeakKeyDictionary())


@dataclass(eq=False)
class QuotaWatch:
    """Guards one command: `start()` before it, `watch(kill)` while it runs, `settle()` after."""

    upper: Path
    quota: int  # bytes
    allowance: int = 0
    start_charge: int = 0
    baseline: dict[str, Entry] = field(default_factory=dict)
    peak: int = 0
    tripped: bool = False
    _scan_seconds: float = 0.0
    _charge: int = 0  # at the last scan
    _scanned: float = 0.0  # monotonic time the last scan ended
    _free: int = 0  # the host filesystem's free bytes when the last scan began

    def start(self, listing: dict[str, Entry] | None = None) -> None:
        """Take the layer's baseline (`listing`: a walk already made, see `listed`)."""
        self.baseline = dict(walk(self.upper)) if listing is None else listing
        self.start_charge = sum(e.charge for e in self.baseline.values())
        self.allowance = max(self.quota, self.start_charge)

    async def watch(self, kill: Callable[[], None]) -> None:
        """Scan when due until the layer passes the allowance, then `kill()` once and return."""
        self._charge, self._scanned = self.start_charge, time.monotonic()
        self._free = _free_bytes(self.upper)
        ticker = _TICKERS.setdefault(asyncio.get_running_loop(), _Ticker())
        while True:
            await ticker.until_due(self)
            self._free, began = _free_bytes(self.upper), time.monotonic()  # later growth: next scan
            if self._scan_seconds > IN_LOOP_SCAN:
                self._charge = await asyncio.to_thread(usage, self.upper, self.allowance)
            else:
                self._charge = usage(self.upper, self.allowance)
            self._scanned = time.monotonic()
            self._scan_seconds = self._scanned - began
            if self._charge > self.allowance:
                self.peak, self.tripped = max(self.peak, self._charge), True
                kill()
                return

    def due(self, now: float) -> bool:
        """Whether to scan now (see `scan_due`)."""
        dropped = self._free - _free_bytes(self.upper)
        return self.scan_due(now - self._scanned, dropped, self.allowance - self._charge)

    def scan_due(self, since_scan: float, dropped: int, headroom: int) -> bool:
        """The host filesystem lost half our headroom since the last scan (whoever wrote it), or
        POLL_MAX passed; never sooner than DUTY x what the last scan took."""
        if since_scan < DUTY * self._scan_seconds:
            return False
        return since_scan >= POLL_MAX or dropped >= max(headroom // 2, TRIGGER_FLOOR)

    def within(self, listing: dict[str, Entry]) -> bool:
        """Whether a walk made after the command shows nothing to take back."""
        return not self.tripped and sum(e.charge for e in listing.values()) <= self.allowance

    def settle(self, listing: dict[str, Entry] | None = None) -> QuotaReport | None:
        """Take back growth past the allowance (the command's processes must be dead)."""
        now = dict(walk(self.upper)) if listing is None else listing
        if self.within(now):
            return None
        total = sum(e.charge for e in now.values())
        self.peak = max(self.peak, total)
        removed: list[str] = []
        for path in self._new_files(now) + self._new_dirs(now) + self._grown(now):
            if total <= self.allowance:
                break
            freed = self._take_back(path, now[path])
            if freed:
                total -= freed
                removed.append(path)
        return QuotaReport(self.quota, self.peak, total, self.tripped, tuple(removed))

    def _new_files(self, now: dict[str, Entry]) -> list[str]:
        fresh = [p for p, e in now.items() if e.kind == "file" and p not in self.baseline]
        return sorted(fresh, key=lambda p: now[p].age, reverse=True)

    def _new_dirs(self, now: dict[str, Entry]) -> list[str]:
        fresh = [p for p, e in now.items() if e.kind == "dir" and p not in self.baseline]
        return sorted(fresh, key=lambda p: (p.count("/"), now[p].age), reverse=True)

    def _grown(self, now: dict[str, Entry]) -> list[str]:
        grown = [p for p, e in now.items() if e.kind == "file" and p in self.baseline
                 and e.charge > self.baseline[p].charge]
        return sorted(grown, key=lambda p: now[p].age, reverse=True)

    def _take_back(self, path: str, entry: Entry) -> int:
        """Charge freed by removing (new) or cutting back (grown) `path`; 0 if it cannot be."""
        try:
            top = os.open(self.upper, _DIR)
        except OSError:
            return 0
        parent, held = top, []
        try:
            *dirs, name = path.split("/")
            for part in dirs:  # each component opened with O_NOFOLLOW: never onto host files
                opened = _open_dir(parent, part)
                if opened is None:
                    return 0
                held.append(opened)
                parent = opened[0]
            return _take_back_at(parent, name, entry, self.baseline.get(path))
        except (OSError, RecursionError):  # not empty (whiteouts), not a regular file, gone
            return 0
        finally:
            for opened in reversed(held):
                _close_dir(*opened)
            os.close(top)


def _take_back_at(parent: int, name: str, entry: Entry, before: Entry | None) -> int:
    if before is not None:  # it was there at the start: cut back to its size then
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=parent)
        except PermissionError:  # made read-only by the command: the owner may write it
            _add_mode(parent, name, 0o200)
            fd = os.open(name, flags, dir_fd=parent)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return 0
            size = min(before.size, entry.size)
            os.ftruncate(fd, size + 1)  # a change of size: ext4 then drops blocks past the end
            os.ftruncate(fd, size)
            return entry.charge - _charge(os.fstat(fd))
        finally:
            os.close(fd)
    try:
        _remove(parent, name, entry)
    except PermissionError:  # the command locked the directory: open it for its owner
        os.chmod(f"/proc/self/fd/{parent}", stat.S_IMODE(os.fstat(parent).st_mode) | 0o700)
        _remove(parent, name, entry)
    return entry.charge


def _remove(parent: int, name: str, entry: Entry) -> None:
    if entry.kind != "dir":
        os.unlink(name, dir_fd=parent)
    elif entry.charge == DEEP_CHARGE:  # what lies below was never listed
        shutil.rmtree(name, dir_fd=parent)  # fd-based: does not follow symlinks either
    else:
        os.rmdir(name, dir_fd=parent)
