"""Inside the sandbox: the worker, the only process that imports and runs the agent's sources.

Forked by `grader_start` before the grading config (the nonce) is read, it keeps no descriptor
but its channel (and /dev/null on 0-2) and runs in its sources folder with a clean environment. It answers one request at a time: import a declared module, get or set
an attribute, call, apply an operator. Values go back as `grader_codec` data; what cannot be
copied stays here as a handle (an index into `objects`), raised exceptions go back as their
class chain, builtin base and message, and lists, dicts, sets and bytearrays an argument's call
changed go back so the caller can copy the change into its own objects.

Invariant: nothing here is trusted. The trusted side treats every answer as data that it
validates; this process holds no secret (no nonce, no report descriptor) and can only make
the tests it serves fail (or time out) by lying, crashing or hanging.
"""

from __future__ import annotations

import importlib
import operator
import os
import socket
import sys
import types
from typing import Any

if __package__:
    from rl_daytona.tasks import grader_codec as codec
else:  # copied into the sandbox next to rlgrade_codec.py
    import rlgrade_codec as codec  # type: ignore[no-redef]

MAX_TEXT = 4000


def _exit(obj: Any, *args: Any) -> Any:
    return type(obj).__exit__(obj, None, None, None)


OPS: dict[str, Any] = {
    "len": len, "iter": iter, "next": next, "bool": bool, "hash": hash, "repr": repr, "str": str,
    "format": format, "contains": operator.contains, "getitem": operator.getitem,
    "setitem": operator.setitem, "delitem": operator.delitem, "eq": operator.eq, "ne": operator.ne,
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "add": operator.add,
    "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv, "floordiv": operator.floordiv,
    "mod": operator.mod, "pow": operator.pow, "matmul": operator.matmul, "and": operator.and_,
    "or": operator.or_, "xor": operator.xor, "lshift": operator.lshift, "rshift": operator.rshift,
    "neg": operator.neg, "pos": operator.pos, "abs": abs, "invert": operator.invert, "int": int,
    "float": float, "index": operator.index, "complex": complex, "round": round, "reversed": reversed,
    "isinstance": isinstance, "enter": lambda o: type(o).__enter__(o), "exit": _exit,
}
MUTABLE = (list, dict, set, bytearray)


class Worker:
    """The handle table and the request handlers."""

    def __init__(self) -> None:
        self.objects: list[Any] = []
        self.ids: dict[int, int] = {}

    def handle(self, obj: Any) -> dict[str, Any]:
        if issubclass(type(obj), type) and issubclass(obj, BaseException):
            return exception_class(obj)
        key = id(obj)
        if key not in self.ids:
            self.ids[key] = len(self.objects)
            self.objects.append(obj)
        is_class = issubclass(type(obj), type)  # type(), never obj.__class__, which may lie
        kind = "class" if is_class else "module" if type(obj) is types.ModuleType else "object"
        name = type.__dict__["__qualname__"].__get__(obj if is_class else type(obj))
        if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)):
            name = obj.__name__
        return {"h": self.ids[key], "k": kind, "n": str(name)[:200]}

    def lookup(self, data: dict[str, Any]) -> Any:
        index = data.get("h")
        if type(index) is not int or not 0 <= index < len(self.objects):
            raise ValueError(f"unknown handle {index!r}")
        return self.objects[index]

    def enc(self, value: Any) -> Any:
        try:
            return codec.encode(value, self.handle)
        except codec.CannotEncode:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. a metaclass lying about a class name
            raise codec.CannotEncode(f"a value that cannot be described ({type(exc).__name__}: {exc})") from None

    def dec(self, data: Any) -> Any:
        return codec.decode(data, self.lookup, _no_exception_class)

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "import":
            module = importlib.import_module(str(request["name"]))
            names = {k: self._entry(v) for k, v in vars(module).items() if not (k.startswith("__") and k.endswith("__"))}
            all_names = getattr(module, "__all__", None)
            return {"ok": {"module": self.handle(module), "names": names,
                           "all": [str(n) for n in all_names] if isinstance(all_names, (list, tuple)) else None,
                           "package": hasattr(module, "__path__")}}
        target = self.lookup(request) if "h" in request else None
        if op == "getattr":
            return {"ok": self.enc(getattr(target, str(request["name"])))}
        if op == "setattr":
            setattr(target, str(request["name"]), self.dec(request["v"]))
            return {"ok": None}
        if op == "delattr":
            delattr(target, str(request["name"]))
            return {"ok": None}
        if op == "call":
            return self._call(target, request)
        if op == "op":
            return {"ok": self.enc(OPS[str(request["name"])](*self.dec(request["a"])))}
        raise ValueError(f"unknown request {op!r}")

    def _entry(self, value: Any) -> Any:
        try:
            return {"v": self.enc(value)}
        except Exception as exc:  # noqa: BLE001 - this one name cannot cross; the others can
            return {"u": f"{type(exc).__name__}: {exc}"[:MAX_TEXT]}

    def _call(self, target: Any, request: dict[str, Any]) -> dict[str, Any]:
        args = self.dec(request["a"])
        kwargs = {str(k): self.dec(v) for k, v in request["k"].items()}
        before = {**{str(i): (a, v) for i, (a, v) in enumerate(zip(request["a"], args))},
                  **{k: (request["k"][k], v) for k, v in kwargs.items()}}
        result = self.enc(target(*args, **kwargs))
        changed = {}
        for key, (sent, value) in before.items():
            if isinstance(value, MUTABLE):
                now = self.enc(value)
                if now != sent:
                    changed[key] = now
        return {"ok": result, "m": changed}


def _no_exception_class(data: dict[str, Any]) -> Any:
    raise ValueError("exception classes cannot be sent to the code under test")


def exception_class(cls: type) -> dict[str, Any]:
    """An exception class as its chain of non-builtin classes and its first builtin base."""
    chain, base = [], "Exception"
    for klass in type.mro(cls):
        if klass.__module__ == "builtins" and klass.__name__ in codec.BUILTIN_EXCEPTIONS:
            base = klass.__name__
            break
        name = klass.__name__ if klass.__name__.isidentifier() else "RemoteError"
        chain.append([f"{klass.__module__}.{klass.__qualname__}"[:300], name])
    return {"ec": chain, "base": base}


def exception_data(exc: BaseException, worker: Worker) -> dict[str, Any]:
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001
        message = f"<{type(exc).__name__} whose str() failed>"
    try:
        args = worker.enc(tuple(exc.args))
    except Exception:  # noqa: BLE001 - args that cannot cross: the message stands in for them
        args = None
    import traceback

    text = "".join(traceback.format_exception(exc, limit=-8))[-MAX_TEXT:]
    return {"cls": exception_class(type(exc)), "msg": message[:MAX_TEXT], "args": args, "tb": text}


def serve(channel: socket.socket, worker: Worker) -> None:
    while True:
        try:
            request = codec.read_message(channel.recv)
        except EOFError:
            return
        try:
            reply = worker.answer(request)
        except codec.CannotEncode as exc:
            reply = {"fail": f"the code under test returned {exc}"[:MAX_TEXT]}
        except BaseException as exc:  # noqa: BLE001 - every exception of the code under test crosses
            reply = {"err": exception_data(exc, worker)}
        reply["id"] = request.get("id")
        try:
            data = codec.dumps(reply)
        except codec.CannotEncode as exc:
            data = codec.dumps({"id": request.get("id"), "fail": f"the answer could not cross: {exc}"[:MAX_TEXT]})
        channel.sendall(data)


NOBODY = 65534


def drop_to_nobody(src: str, home: str) -> None:
    """Where the sandbox runs graders as root, the worker runs as nobody: it can then neither
    signal the trusted process nor write what root wrote (its own folders are handed over)."""
    os.chmod(os.path.dirname(src), 0o711)  # the grading root: traversable, not listable
    for top in (src, home):
        for folder, _, files in os.walk(top):
            for path in (folder, *(os.path.join(folder, f) for f in files)):
                os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def become_worker(channel: socket.socket, src: str, home: str) -> None:
    """In the freshly forked child: keep only the channel, move into `src`, serve until EOF."""
    os.closerange(3, channel.fileno())
    os.closerange(channel.fileno() + 1, 1 << 16)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if os.geteuid() == 0:
        drop_to_nobody(src, home)
    os.chdir(src)
    path = os.environ.get("PATH", "/usr/bin:/bin")
    os.environ.clear()
    os.environ.update(PATH=path, HOME=home, TMPDIR=home, LANG="C.UTF-8", LC_ALL="C.UTF-8")
    sys.path.insert(0, src)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * codec.MAX_DEPTH))
    serve(channel, Worker())
