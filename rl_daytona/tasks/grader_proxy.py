"""Inside the trusted pytest process: the code under test, reached only through the worker.

`Channel` is the one connection to the worker (the only process that imports the agent's
sources); `Remote`/`RemoteClass` are the handles the tests hold for its objects, and
`grader_imports` builds the declared modules out of them, so `from calc import mean` in an
unchanged test file binds a `Remote` whose calls cross the channel as data.

Invariant: this process never imports or executes the agent's code: every value from the
worker is rebuilt by `grader_codec.decode` as plain data or a `Remote` handle. A comparison or
arithmetic between a handle and a plain value is refused (`CannotCross`), so an object of the
code under test never decides how it compares with a value the test wrote; between two handles
the worker decides. Every failure of the boundary (`CannotCross`, `WorkerFailure`) is a
`BaseException`, so no `pytest.raises(Exception)` or `except Exception` in a test can swallow it.

What cannot cross (each raises `CannotCross` naming it): functions, lambdas and other objects
of the tests passed into the code under test (callbacks), exception instances or classes sent
to it, subclassing a class of the code under test, comparisons and arithmetic between its
objects and plain values. What crosses with a difference: module-level values are copied when
the module is imported (later rebinding inside the worker is not seen; handles stay live);
arguments are copies (lists, dicts, sets and bytearrays the call changed are copied back in
place, top level only, aliasing between arguments is lost); subclasses of builtin types arrive
as their base type; context managers of the code under test see no exception in `__exit__`.
"""

from __future__ import annotations

import os
import signal
import socket
import types
from typing import Any, Callable

if __package__:
    from rl_daytona.tasks import grader_codec as codec
else:  # copied into the sandbox next to rlgrade_codec.py
    import rlgrade_codec as codec  # type: ignore[no-redef]

CROSSING_ERRORS: list[str] = []


class CannotCross(BaseException):
    """A test needed something that cannot cross the grading boundary (a task-authoring error)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        CROSSING_ERRORS.append(message[:500])


class WorkerFailure(BaseException):
    """The worker died, hung, broke the protocol or returned a value over the limits."""


class Channel:
    """The one connection to the worker process (forked by `grader_start` before any secret)."""

    def __init__(self, sock: socket.socket, pid: int, timeout: float) -> None:
        self.sock, self.pid = sock, pid
        sock.settimeout(timeout)
        self.dead = ""
        self.seq = 0
        self.remotes: dict[int, Remote] = {}

    def fail(self, why: str) -> WorkerFailure:
        self.dead = self.dead or why
        self.close()
        return WorkerFailure(self.dead)

    def close(self) -> None:
        """Kill the worker (idempotent)."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.pid = 0
        self.sock.close()

    def request(self, message: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Send one request; (decoded-later answer data, changed arguments) or raise."""
        if self.dead:
            raise WorkerFailure(self.dead)
        self.seq += 1
        message["id"] = self.seq
        try:
            data = codec.dumps(message)
        except (codec.TooLarge, ValueError) as exc:
            raise CannotCross(f"a value sent to the code under test is too large: {exc}") from None
        try:
            self.sock.sendall(data)
            reply = codec.read_message(self.sock.recv)
        except (OSError, EOFError, ValueError) as exc:
            why = "did not answer in time" if isinstance(exc, TimeoutError) else f"failed ({type(exc).__name__}: {exc})"
            raise self.fail(f"the worker running the code under test {why}") from None
        if type(reply) is not dict or reply.get("id") != self.seq:
            raise self.fail("the worker running the code under test broke the protocol")
        if "fail" in reply:
            raise WorkerFailure(str(reply["fail"])[:2000])
        if "err" in reply:
            raise remote_exception(reply["err"], self)
        changed = reply.get("m") or {}
        return reply.get("ok"), changed if type(changed) is dict else {}

    def decode(self, data: Any) -> Any:
        try:
            return codec.decode(data, self.remote, exception_class)
        except (ValueError, TypeError, KeyError, codec.TooLarge) as exc:
            raise self.fail(f"the worker sent a value that is not boundary data ({exc})") from None

    def remote(self, data: dict[str, Any]) -> Remote:
        index = data.get("h")
        if type(index) is not int:
            raise ValueError("a handle without an integer id")
        if index not in self.remotes:
            kind = RemoteClass if data.get("k") == "class" else Remote
            self.remotes[index] = kind(self, index, str(data.get("n", "?"))[:200])
        return self.remotes[index]

    def encode(self, value: Any) -> Any:
        return codec.encode(value, self._sendable)

    def _sendable(self, value: Any) -> Any:
        if isinstance(value, Remote) and object.__getattribute__(value, "_rl_channel") is self:
            return {"h": object.__getattribute__(value, "_rl_id")}
        what = f"the function {value.__qualname__}" if isinstance(value, types.FunctionType) else \
            f"a {type(value).__qualname__} object"
        raise CannotCross(f"{what} from the tests cannot be passed to the code under test")

    def call(self, message: dict[str, Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        message.update(a=[self.encode(a) for a in args], k={k: self.encode(v) for k, v in kwargs.items()})
        data, changed = self.request(message)
        for key, new in changed.items():
            original = args[int(key)] if key.isdigit() and int(key) < len(args) else kwargs.get(key)
            copy_back(original, self.decode(new))
        return self.decode(data)


def copy_back(original: Any, new: Any) -> None:
    """Apply the worker's change of an argument to the test's own object, in place."""
    if type(original) is not type(new):
        return
    if isinstance(original, (list, bytearray)):
        original[:] = new
    elif isinstance(original, (dict, set)):
        original.clear()
        original.update(new)


_EXC_CLASSES: dict[str, type] = {}


def _remote_str(self: BaseException) -> str:
    return str(getattr(self, "_rl_message", BaseException.__str__(self)))


def exception_class(data: dict[str, Any]) -> type:
    """The local class standing for a remote exception class (a builtin, or a generated subclass)."""
    chain, base_name = data.get("ec"), data.get("base")
    base = codec.BUILTIN_EXCEPTIONS.get(str(base_name), Exception)
    if type(chain) is not list:
        raise ValueError("malformed exception class")
    if not issubclass(base, Exception):
        chain, base = [*chain, [f"builtins.{base.__name__}", base.__name__]], Exception
    cls: type = base
    for entry in reversed(chain):
        key, name = (str(entry[0]), str(entry[1])) if type(entry) is list and len(entry) == 2 else ("?", "?")
        if key not in _EXC_CLASSES:
            _EXC_CLASSES[key] = type(name if name.isidentifier() else "RemoteError", (cls,),
                                     {"__module__": key.rpartition(".")[0] or "remote", "__str__": _remote_str})
        cls = _EXC_CLASSES[key]
    return cls


def remote_exception(err: Any, channel: Channel) -> BaseException:
    """The exception the code under test raised, rebuilt locally (never a boundary failure)."""
    if type(err) is not dict:
        return channel.fail("the worker sent a malformed exception")
    cls = channel.decode(err.get("cls"))
    message = str(err.get("msg", ""))
    try:
        args = channel.decode(err.get("args")) if err.get("args") is not None else (message,)
        exc = cls(*args) if isinstance(args, tuple) else cls(message)
    except Exception:  # noqa: BLE001 - a builtin that wants other arguments: the message only
        exc = exception_class({"ec": [["remote." + cls.__name__, cls.__name__]], "base": "Exception"})(message)
    exc._rl_message = message  # type: ignore[attr-defined]
    if err.get("tb"):
        exc.add_note("in the worker running the code under test:\n" + str(err["tb"])[-3000:])
    return exc


def _binary(name: str, symbol: str, reflected: bool = False) -> Callable[[Any, Any], Any]:
    def method(self: Remote, other: Any) -> Any:
        if isinstance(other, Remote):
            pair = [other, self] if reflected else [self, other]
            return _op(self, name, *pair)
        if other is None and name in ("eq", "ne"):
            return name == "ne"
        kind = object.__getattribute__(self, "_rl_name")
        raise CannotCross(f"'{symbol}' between a {kind} object of the code under test and a plain "
                          f"{type(other).__name__} is not decided by the code under test; compare plain values")
    method.__name__ = f"__{'r' if reflected else ''}{name}__"
    return method


def _unary(name: str) -> Callable[..., Any]:
    def method(self: Remote, *args: Any) -> Any:
        return _op(self, name, self, *args)
    method.__name__ = f"__{name}__"
    return method


def _op(self: Remote, name: str, *args: Any) -> Any:
    channel = object.__getattribute__(self, "_rl_channel")
    data, _ = channel.request({"op": "op", "name": name, "a": channel.encode(list(args))})
    return channel.decode(data)


class Remote:
    """An object the worker keeps: attribute access, calls and operators are forwarded."""

    __slots__ = ("_rl_channel", "_rl_id", "_rl_name", "__weakref__")

    def __init__(self, channel: Channel, index: int, name: str) -> None:
        object.__setattr__(self, "_rl_channel", channel)
        object.__setattr__(self, "_rl_id", index)
        object.__setattr__(self, "_rl_name", name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_rl_"):
            raise AttributeError(name)
        channel = object.__getattribute__(self, "_rl_channel")
        data, _ = channel.request({"op": "getattr", "h": object.__getattribute__(self, "_rl_id"), "name": name})
        return channel.decode(data)

    def __setattr__(self, name: str, value: Any) -> None:
        channel = object.__getattribute__(self, "_rl_channel")
        channel.request({"op": "setattr", "h": object.__getattribute__(self, "_rl_id"), "name": name,
                         "v": channel.encode(value)})

    def __delattr__(self, name: str) -> None:
        channel = object.__getattribute__(self, "_rl_channel")
        channel.request({"op": "delattr", "h": object.__getattribute__(self, "_rl_id"), "name": name})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        channel = object.__getattribute__(self, "_rl_channel")
        return channel.call({"op": "call", "h": object.__getattribute__(self, "_rl_id")}, args, kwargs)

    def __exit__(self, *exc_info: Any) -> Any:
        return _op(self, "exit", self)

    def __repr__(self) -> str:
        try:
            text = _op(self, "repr", self)
        except (Exception, WorkerFailure):  # noqa: BLE001 - a display only
            text = None
        name, index = object.__getattribute__(self, "_rl_name"), object.__getattribute__(self, "_rl_id")
        return text if type(text) is str else f"<{name} object #{index} in the worker>"

    __hash__ = _unary("hash")  # type: ignore[assignment]


for _name in ("len", "iter", "next", "bool", "str", "format", "contains", "getitem", "setitem",
              "delitem", "neg", "pos", "abs", "invert", "int", "float", "index", "complex", "round",
              "reversed", "enter"):
    setattr(Remote, f"__{_name}__", _unary(_name))
for _name, _symbol in (("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")):
    setattr(Remote, f"__{_name}__", _binary(_name, _symbol))
for _name, _symbol in (("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/"), ("floordiv", "//"),
                       ("mod", "%"), ("pow", "**"), ("matmul", "@"), ("and", "&"), ("or", "|"), ("xor", "^"),
                       ("lshift", "<<"), ("rshift", ">>")):
    setattr(Remote, f"__{_name}__", _binary(_name, _symbol))
    setattr(Remote, f"__r{_name}__", _binary(_name, _symbol, reflected=True))


class RemoteClass(Remote):
    """A class the worker keeps: calling it makes an instance there; isinstance asks the worker."""

    __slots__ = ()

    def __instancecheck__(self, obj: Any) -> bool:
        return isinstance(obj, Remote) and bool(_op(self, "isinstance", obj, self))

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        raise CannotCross(f"the tests cannot subclass {object.__getattribute__(self, '_rl_name')}, "
                          "a class of the code under test")
