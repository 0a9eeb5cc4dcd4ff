"""Features of the choices inside a `sed -i` edit: which line, which fragment, what instead.

Invariant: everything here is a pure function of (observation, completion prefix). The
draft replays the substitutions already written in this command on the believed source,
so the second substitution of a command sees the line as the first one left it. Text
lookups are memoised by text only, so repeated requests over the same file stay cheap.
"""

from __future__ import annotations

import ast
import builtins
import dis
import math
import re
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Sequence

from rl_daytona.policy import grammar as G
from rl_daytona.policy import params as P
from rl_daytona.policy import vocab as V
from rl_daytona.policy.decision import Decision, sparse_block
from rl_daytona.policy.observe import (Function, Observation, apply_substitution, code_key, failing_functions,
                                      same_code)

SLOTS = ("edit_line", "old", "new", "flag", "sep")
_OLD = {name: i for i, name in enumerate(P.OLD_FEATURES)}
_NEW = {name: i for i, name in enumerate(P.NEW_FEATURES)}
_FLAG = {name: i for i, name in enumerate(P.FLAG_FEATURES)}
_LINE = {name: i for i, name in enumerate(P.LINE_FEATURES)}


def _kind_relation(a: int, b: int) -> tuple[tuple[int, float], ...]:
    """new_w features relating the kinds of an old and a new fragment."""
    ka, kb = V.FRAGMENT_KIND[a], V.FRAGMENT_KIND[b]
    if not V.kinds_compatible(ka, kb):
        return ((P.NEW_FEATURES.index("incompatible_kind"), 1.0),)
    same = ((P.NEW_FEATURES.index("same_kind"), 1.0),) if ka == kb else ()
    return same + ((P.NEW_FEATURES.index("compatible_kind"), 1.0),)


_KIND_RELATION = tuple(tuple(_kind_relation(a, b) for b in range(P.N_FRAGMENTS)) for a in range(P.N_FRAGMENTS))


@lru_cache(maxsize=65536)
def fragments_on(text: str) -> tuple[int, ...]:
    """Fragment indices that occur in a line of code."""
    return tuple(f for f, regex in enumerate(V.FRAGMENT_REGEX) if regex.search(text))


@lru_cache(maxsize=65536)
def replaced(text: str, old: int) -> tuple[str, ...]:
    """The line after replacing the first `old` by each fragment (index = new fragment)."""
    return tuple(apply_substitution(text, G.Substitution(0, old, new)) for new in range(P.N_FRAGMENTS))


@lru_cache(maxsize=65536)
def replaced_second(text: str, old: int) -> tuple[str, ...]:
    """The line after replacing the second `old` by each fragment (the `/2` flag)."""
    return tuple(apply_substitution(text, G.Substitution(0, old, new, 2)) for new in range(P.N_FRAGMENTS))


@lru_cache(maxsize=65536)
def occurrences(text: str, old: int) -> int:
    return len(V.FRAGMENT_REGEX[old].findall(text))


_BUILTINS = frozenset(dir(builtins))


@lru_cache(maxsize=65536)
def check_function(source: str) -> tuple[bool, frozenset[str]]:
    """(compiles, global names it reads) of one top-level function's text.

    What any programmer sees at a glance: whether an edit leaves valid Python, and which
    names the function would look up outside itself (a typo'd or foreign local shows here).
    """
    try:
        with warnings.catch_warnings():  # "'int' object is not callable" is as broken as a syntax error
            warnings.simplefilter("error", SyntaxWarning)
            module = compile(source, "<edit>", "exec")
    except (SyntaxError, SyntaxWarning, ValueError):
        return False, frozenset()
    names: set[str] = set()
    stack = [c for c in module.co_consts if hasattr(c, "co_names")]
    while stack:
        code = stack.pop()
        names.update(global_reads(code))
        stack.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    return True, frozenset(names)


_LOAD_GLOBAL, _LOAD_NAME, _EXTENDED_ARG = dis.opmap["LOAD_GLOBAL"], dis.opmap["LOAD_NAME"], dis.opmap["EXTENDED_ARG"]


def global_reads(code) -> set[str]:  # noqa: ANN001 - a code object
    """The names one code object loads as globals (`LOAD_GLOBAL`, `LOAD_NAME`): what
    `dis.get_instructions` would say, read straight from the 2-byte instructions (CPython >= 3.11:
    inline caches are opcode 0, and LOAD_GLOBAL's argument is the name index shifted left by one).
    Ten times cheaper than `dis`, and the policy asks it of every edit it weighs."""
    raw, names, out, extended = code.co_code, code.co_names, set(), 0
    for i in range(0, len(raw), 2):
        op, arg = raw[i], raw[i + 1] | extended
        if op == _EXTENDED_ARG:
            extended = arg << 8
            continue
        extended = 0
        if op == _LOAD_GLOBAL:
            out.add(names[arg >> 1])
        elif op == _LOAD_NAME:
            out.add(names[arg])
    return out


def _edit_checker(obs: Observation, draft: Draft, line: int) -> Callable[[str | None], tuple[bool, bool]]:
    """after -> (breaks syntax, reads an unknown global) for the function once `line` becomes
    `after`. The function's other lines are joined once: a decision weighs every replacement
    on one line."""
    fn = obs.function_at(line)
    if fn is None:
        return _no_checks
    earlier = [draft.working.get(n, "") for n in range(fn.start, line)]
    head = "\n".join(earlier) + "\n" if earlier else ""
    tail = "".join("\n" + draft.working.get(n, "") for n in range(line + 1, fn.end + 1))
    known = _known_names(tuple(f.name for f in obs.functions))

    def check(after: str | None) -> tuple[bool, bool]:
        if after is None:
            return False, False
        ok, names = check_function((head + after + tail).rstrip() + "\n")
        if not ok:
            return True, False
        return False, bool(names - known) or _updates_unbound(after, earlier)

    return check


def _no_checks(after: str | None) -> tuple[bool, bool]:
    return False, False


@lru_cache(maxsize=4096)
def _known_names(functions: tuple[str, ...]) -> frozenset[str]:
    return _BUILTINS | frozenset(functions)


_AUGMENTED = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:\+|-|\*|/|//|%|\*\*)=")


def _updates_unbound(after: str, earlier: list[str]) -> bool:
    """`m -= ...` where no earlier line of the function (the `def` included) names `m`."""
    found = _AUGMENTED.match(after)
    if not found:
        return False
    name = re.compile(rf"\b{found.group(1)}\b")
    return not any(name.search(text) for text in earlier)


def _has_valid_new(obs: Observation, draft: "Draft", line: int, text: str, old: int) -> bool:
    """Whether some compatible replacement of `old` on this line changes it into valid code."""
    checks = _edit_checker(obs, draft, line)
    for new, after in enumerate(replaced(text, old)):
        if after != text and V.kinds_compatible(V.FRAGMENT_KIND[old], V.FRAGMENT_KIND[new]):
            if checks(after) == (False, False):
                return True
    return False


@dataclass
class Draft:
    """The believed source after the substitutions already written in this command."""

    working: dict[int, str]
    tried_functions: set[str] = field(default_factory=set)
    reverted: set[int] = field(default_factory=set)
    tried_lines: set[int] = field(default_factory=set)
    subs: int = 0


def draft_of(obs: Observation, prefix: Sequence[int]) -> Draft:
    """Replay the finished substitutions of a partial `sed -i` completion."""
    draft = Draft(working=dict(obs.lines))
    line = old = new = -1
    for token in prefix:
        kind = V.PIECES[token].kind if token < V.BYTE_OFFSET else "byte"
        if kind == "line":
            line = V.line_of(token)
        elif kind == "old":
            old = V.fragment_of(token)
        elif kind == "new":
            new = V.fragment_of(token)
        elif kind == "flag":
            _record(draft, obs, G.Substitution(line, old, new, G.occurrence_of(token)))
    return draft


def _record(draft: Draft, obs: Observation, sub: G.Substitution) -> None:
    draft.subs += 1
    before = draft.working.get(sub.line)
    if before is None:
        return
    after = apply_substitution(before, sub)
    draft.working[sub.line] = after
    if before != after and same_code(after, obs.original.get(sub.line)):
        draft.reverted.add(sub.line)
        return
    draft.tried_lines.add(sub.line)
    fn = obs.function_at(sub.line)
    if fn is not None:
        draft.tried_functions.add(fn.name)


def decide_edit(obs: Observation, prefix: Sequence[int], state: G.GrammarState,
                allowed: tuple[int, ...]) -> Decision:
    """The decision for an edit slot (line, old fragment, new fragment, separator), read
    against the file the command edits (`f=PATH`)."""
    obs = obs.for_path(V.path_text(prefix))
    draft = draft_of(obs, prefix)
    if state.slot == "edit_line":
        return _line_decision(obs, draft, allowed)
    if state.slot == "old":
        return _old_decision(obs, draft, state.line, allowed)
    if state.slot == "new":
        return _new_decision(obs, draft, state.line, V.fragment_of(state.old), allowed)
    if state.slot == "flag":
        return _flag_decision(obs, draft, state.line, V.fragment_of(state.old), V.fragment_of(prefix[-1]), allowed)
    return _sep_decision(obs, draft, allowed)


def _line_decision(obs: Observation, draft: Draft, allowed: tuple[int, ...]) -> Decision:
    lines = [n for n in sorted(draft.working) if len(fragments_on(draft.working[n])) > 1]  # not just <eol>
    candidates = tuple(V.LINE_IDS[n - 1] for n in lines) or allowed
    rows, hashes = [], []
    for token in candidates:
        features, keys = _line_features(obs, draft, V.line_of(token))
        rows.append([(_LINE[name], v) for name, v in features.items() if v])
        hashes.append([(P.hashed(*key), 1.0) for key in keys])
    return Decision(candidates, (sparse_block("line_w", rows), sparse_block("line_hash", hashes)))


def _line_features(obs: Observation, draft: Draft, n: int) -> tuple[dict[str, float], list[tuple]]:
    text = draft.working.get(n, "")
    fn = obs.function_at(n)
    failing = fn is not None and fn.name in obs.failing_functions
    changed = n in obs.original and not same_code(text, obs.original[n])
    frags = fragments_on(text)
    features = {
        "in_failing_fn": failing, "in_passing_fn": fn is not None and not failing,
        "outside_fn": fn is None, "is_def": text.startswith("def "),
        "is_return": text.strip().startswith("return"), "dirty_bad": obs.is_dirty_bad(n, text),
        "dirty_good": changed and not failing and not obs.edited_since_test,
        "fn_tried_in_command": fn is not None and fn.name in draft.tried_functions,
        "line_reverted_in_command": n in draft.reverted, "line_tried_in_command": n in draft.tried_lines,
        "log_bad_tries": math.log1p(sum(1 for line, _ in obs.bad_texts if line == n)),
        "log_fragments": math.log1p(len(frags)),
        "failing_fn_untouched": failing and not _function_dirty(obs, draft, fn),
        "calls_failing_fn": failing and calls_failing(obs, fn),
    }
    for kind in {V.FRAGMENT_KIND[f] for f in frags}:
        features[f"has_{kind}"] = 1.0
    # Where in a function to edit is learned per signature of the function's failing tests, which
    # tells its bugs apart: learned across every bug of the function, the line of its most
    # frequent bug took every attempt at the others (calc's mode.no_increment, textkit's
    # truncate.cut: 0 of 40 train attempts fixed).
    where = ("tests", fn.name, n - fn.start, tests_of(obs.failing_tests, fn.name, _names(obs))) if failing \
        else ("line", fn.name if fn else "", n - (fn.start if fn else 0))
    keys = [where, ("text", text.strip())]
    return {k: float(v) for k, v in features.items()}, keys


def _names(obs: Observation) -> tuple[str, ...]:
    return tuple(f.name for f in obs.functions)


@lru_cache(maxsize=4096)
def tests_of(tests: tuple[str, ...], name: str, functions: tuple[str, ...]) -> tuple[str, ...]:
    """The failing tests that name function `name` (as `observe.failing_functions` maps them)."""
    fns = tuple(Function(f, 0, 0) for f in functions)
    return tuple(sorted(t for t in tests if failing_functions((t,), fns) == {name}))


def calls_failing(obs: Observation, fn: Function | None) -> bool:
    """Whether `fn` calls another failing function (which may be why it fails: fix that first)."""
    if fn is None:
        return False
    others = [f for f in obs.failing_functions if f != fn.name]
    if not others:
        return False
    body = "\n".join(obs.lines.get(n, "") for n in range(fn.start + 1, fn.end + 1))
    return _calls_any(body, tuple(sorted(others)))


@lru_cache(maxsize=65536)
def _calls_any(body: str, names: tuple[str, ...]) -> bool:
    return any(re.search(rf"\b{re.escape(name)}\s*\(", body) for name in names)


def _function_dirty(obs: Observation, draft: Draft, fn: Function | None) -> bool:
    if fn is None:
        return False
    return any(not same_code(obs.original[n], draft.working.get(n)) for n in range(fn.start, fn.end + 1)
               if n in obs.original)


@lru_cache(maxsize=1 << 16)
def _puts_back(text: str, old: int, original: str | None, second: bool = False) -> bool:
    """Whether replacing the first (or second) `old` on the line by some fragment gives the
    original line's code again. Cached: a group's attempts meet the same dirty lines."""
    if original is None:
        return False
    return any(same_code(r, original) for r in (replaced_second if second else replaced)(text, old))


def _old_decision(obs: Observation, draft: Draft, line: int, allowed: tuple[int, ...]) -> Decision:
    text = draft.working.get(line)
    candidates = tuple(V.OLD_IDS[f] for f in fragments_on(text)) if text is not None else ()
    candidates = candidates or allowed
    fn = obs.function_at(line)
    name, stripped = (fn.name if fn else ""), (text or "").strip()
    failing = name in obs.failing_functions
    bad = text is not None and obs.is_dirty_bad(line, text)
    rows, hashes, biases = [], [], []
    for token in candidates:
        o = V.fragment_of(token)
        revertible = bad and (_puts_back(text, o, obs.original.get(line))
                              or occurrences(text, o) > 1 and _puts_back(text, o, obs.original.get(line), True))
        repeated = text is not None and occurrences(text, o) > 1
        stuck = text is not None and not _has_valid_new(obs, draft, line, text, o)
        rows.append([(_OLD["revertible"], float(revertible)), (_OLD["in_failing_fn"], float(failing)),
                     (_OLD["repeated_on_line"], float(repeated)), (_OLD["no_valid_new"], float(stuck))])
        hashes.append([(P.hashed("fo", name, o), P.OLD_GAIN), (P.hashed("to", stripped, o), P.OLD_GAIN)])
        biases.append([(o, 1.0)])
    blocks = (sparse_block("old_bias", biases), sparse_block("old_w", rows), sparse_block("old_hash", hashes))
    return Decision(candidates, blocks)


def _new_decision(obs: Observation, draft: Draft, line: int, old: int, allowed: tuple[int, ...]) -> Decision:
    text = draft.working.get(line)
    fn = obs.function_at(line)
    name, stripped = (fn.name if fn else ""), (text or "").strip()
    results = replaced(text, old) if text is not None else None
    bad = text is not None and obs.is_dirty_bad(line, text)
    original = obs.original.get(line)
    rows, hashes, pairs = [], [], []
    checks = _edit_checker(obs, draft, line)
    for token in allowed:
        r = V.fragment_of(token)
        after = results[r] if results is not None else None
        reverts = bad and (same_code(after, original) or same_code(_second(text, old, r), original))
        syntax, unknown = checks(after) if after != text else (False, False)
        rows.append([(_NEW["reverts"], float(reverts)),
                     (_NEW["known_bad"], float((line, after) in obs.bad_texts)), *_KIND_RELATION[old][r],
                     (_NEW["breaks_syntax"], float(syntax)), (_NEW["unknown_name"], float(unknown)),
                     (_NEW["no_change"], float(after == text)),
                     (_NEW["rebinds"], float(after != text and _rebinds(text, old, r)))])
        hashes.append([(P.hashed("for", name, old, r), P.NEW_GAIN), (P.hashed("tor", stripped, old, r), P.NEW_GAIN)])
        pairs.append([(old * P.N_FRAGMENTS + r, 1.0)])
    blocks = (sparse_block("pair_w", pairs), sparse_block("new_w", rows), sparse_block("new_hash", hashes))
    return Decision(allowed, blocks)


@lru_cache(maxsize=1 << 16)
def _rebinds(text: str, old: int, new: int) -> bool:
    """Whether the replacement text, put in place of the first match, does not stay one
    subexpression: `a / len(xs)` -> `a / len(xs) - 1` parses as `(a / len(xs)) - 1`. A coder
    who means `len(xs) - 1` there writes the parentheses, so such an edit is almost never the
    intended one. Only for replacements that are expressions on their own."""
    fragment = V.FRAGMENTS[new]
    if old == V.FRAGMENTS.index(V.EOL) or not _is_expression(fragment):
        return False
    pattern = V.FRAGMENT_REGEX[old]
    plain = pattern.sub(lambda _m: fragment, text, count=1)
    grouped = pattern.sub(lambda _m: f"({fragment})", text, count=1)
    a, b = _statement_ast(plain), _statement_ast(grouped)
    return a is not None and b is not None and a != b


@lru_cache(maxsize=4096)
def _is_expression(fragment: str) -> bool:
    try:
        ast.parse(fragment.strip(), mode="eval")
    except SyntaxError:
        return False
    return bool(fragment.strip())


def _statement_ast(line: str) -> str | None:
    """ast.dump of one source line as a statement (a block header gets a `pass` body), or None."""
    key = code_key(line)
    return None if key.startswith("\0") else key


def _second(text: str | None, old: int, new: int) -> str | None:
    """The line after replacing the second match of `old` (the `/2` flag)."""
    return None if text is None else apply_substitution(text, G.Substitution(0, old, new, 2))


def _flag_decision(obs: Observation, draft: Draft, line: int, old: int, new: int,
                   allowed: tuple[int, ...]) -> Decision:
    """Which match to replace: the first, the second, or every one."""
    text = draft.working.get(line)
    bad = text is not None and obs.is_dirty_bad(line, text)
    original = obs.original.get(line)
    slot = P.SLOTS.index("flag")
    rows, features = [], []
    checks = _edit_checker(obs, draft, line)
    for token in allowed:
        rows.append([(slot * V.BYTE_OFFSET + token, 1.0)])
        if text is None:
            features.append([])
            continue
        after = apply_substitution(text, G.Substitution(line, old, new, G.occurrence_of(token)))
        syntax, unknown = checks(after) if after != text else (False, False)
        features.append([(_FLAG["reverts"], float(bad and same_code(after, original))),
                         (_FLAG["no_change"], float(after == text)), (_FLAG["breaks"], float(syntax or unknown))])
    return Decision(allowed, (sparse_block("slot_w", rows), sparse_block("flag_w", features)))


def _sep_decision(obs: Observation, draft: Draft, allowed: tuple[int, ...]) -> Decision:
    untried = any(fn.name in obs.failing_functions and fn.name not in draft.tried_functions
                  and not calls_failing(obs, fn) for fn in obs.functions)
    unreverted = any(obs.is_dirty_bad(n, t) for n, t in draft.working.items())
    context = {"bias": 1.0, "untried_failing_fn": float(untried), "unreverted_bad_line": float(unreverted),
               "subs_2": float(draft.subs >= 2), "subs_3": float(draft.subs >= 3)}
    rows = []
    for token in allowed:
        column = 0 if token == G.MORE_ID else 1
        rows.append([(P.SEP_CONTEXT.index(k) * 2 + column, v) for k, v in context.items() if v])
    return Decision(allowed, (sparse_block("sep_w", rows),))
