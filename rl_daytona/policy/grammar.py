"""The command grammar: which piece may come next, so every completion is a valid command.

Invariant: `allowed(state)` depends only on the pieces of the completion so far, and every
path from `START` to `DONE` renders a valid shell command (or is `<submit>`). Rendering is
injective on complete commands, so `parse_command(render(ids)) == ids`.

Commands (every one but <submit> ends with the empty piece <eoc>); PATH is spelled in byte
tokens (`vocab.PATH_CHARS`, at least one):
    <submit>
    python -m pytest -q [--tb=no | -x]
    awk (every source, numbered) $(find ...); python -m pytest -q --tb=no      (the look)
    (cat | nl -ba | grep -n 'def ' | grep -n 'return') PATH
    (head -n | tail -n) N ' ' PATH
    sed -n 'A,Bp' PATH                                   (B >= A)
    f=PATH; sed -i 'L1s/O1/N1/[2|g];L2s/O2/N2/[2|g]...' "$f" [&& python -m pytest -q --tb=no]
                                       (1..MAX_SUBSTITUTIONS substitutions, each N != O)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rl_daytona.policy import vocab as V

_ID = V.piece_id
PYTEST_IDS = frozenset(_ID(v) for v in V.PYTEST_VERBS)
LOOK_ID = _ID(V.LOOK_VERB)
FILE_VIEW_IDS = frozenset(_ID(v) for v in V.FILE_VIEW_VERBS)
COUNT_VIEW_IDS = frozenset(_ID(v) for v in V.COUNT_VIEW_VERBS)
RANGE_VIEW_ID = _ID(V.RANGE_VIEW_VERB)
EDIT_ID = _ID(V.EDIT_VERB)
VERB_CHOICES: tuple[int, ...] = (V.SUBMIT,) + tuple(_ID(v) for v in V.VERBS)
EDIT_OPEN_ID = _ID(V.EDIT_OPEN)
PATH_IDS = V.PATH_IDS
FLAG_IDS: tuple[int, ...] = V.ids_of("flag")
MORE_ID, CLOSE_ID = V.ids_of("sep")
SUFFIX_CHOICES: tuple[int, ...] = (V.EOC,) + V.ids_of("suffix")


@dataclass(frozen=True)
class GrammarState:
    """Where a completion is in the grammar, plus the choices later masks depend on."""

    slot: str = "verb"
    verb: int = -1
    line: int = -1
    old: int = -1
    subs: int = 0


START = GrammarState()
DONE = GrammarState(slot="done")

_NEXT = {
    "count": "space", "space": "path0", "path0": "path", "range_a": "comma", "comma": "range_b",
    "range_b": "p", "p": "path0", "edit_line": "s", "s": "old", "old": "slash", "slash": "new",
    "new": "flag", "flag": "sep", "end": "done",
}
_GLUE = {"space": " ", "comma": ",", "p": "p' ", "s": "s/", "slash": "/"}
_LINE_SLOTS = ("count", "range_a", "edit_line")


def allowed(state: GrammarState) -> tuple[int, ...]:
    """The piece ids the grammar allows next (empty when the command is done)."""
    slot = state.slot
    if slot == "verb":
        return VERB_CHOICES
    if slot in _LINE_SLOTS:
        return V.LINE_IDS
    if slot == "range_b":
        return V.LINE_IDS[state.line - 1:]
    if slot in _GLUE:
        return (_ID(_GLUE[slot]),)
    if slot == "new":
        return _NEW_CHOICES[V.fragment_of(state.old)]
    if slot == "path0":
        return PATH_IDS
    if slot == "path":
        return PATH_IDS + ((EDIT_OPEN_ID,) if state.verb == EDIT_ID else (V.EOC,))
    if slot == "sep":
        return (MORE_ID, CLOSE_ID) if state.subs < V.MAX_SUBSTITUTIONS else (CLOSE_ID,)
    return _FIXED_CHOICES.get(slot, ())


_NEW_CHOICES = tuple(tuple(t for t in V.NEW_CHOICES if V.fragment_of(t) != f) for f in range(len(V.FRAGMENTS)))
_FIXED_CHOICES = {"old": V.OLD_CHOICES, "flag": FLAG_IDS, "suffix": SUFFIX_CHOICES,
                  "end": (V.EOC,)}


def advance(state: GrammarState, token: int) -> GrammarState:
    """The state after appending `token` (which must be allowed)."""
    slot = state.slot
    if slot == "verb":
        return _after_verb(token)
    if slot in ("range_a", "edit_line"):
        return replace(state, slot=_NEXT[slot], line=V.line_of(token))
    if slot == "old":
        return replace(state, slot="slash", old=token)
    if slot == "flag":
        return replace(state, slot="sep", subs=state.subs + 1)
    if slot == "sep":
        return replace(state, slot="edit_line" if token == MORE_ID else "suffix")
    if slot == "suffix":
        return DONE if token == V.EOC else replace(state, slot="end")
    if slot == "path":
        if token == V.EOC:
            return DONE
        return replace(state, slot="edit_line" if token == EDIT_OPEN_ID else "path")
    return DONE if _NEXT[slot] == "done" else replace(state, slot=_NEXT[slot])


def _after_verb(token: int) -> GrammarState:
    if token == V.SUBMIT:
        return DONE
    if token in PYTEST_IDS or token == LOOK_ID:
        slot = "end"
    elif token in FILE_VIEW_IDS or token == EDIT_ID:
        slot = "path0"
    elif token in COUNT_VIEW_IDS:
        slot = "count"
    elif token == RANGE_VIEW_ID:
        slot = "range_a"
    else:
        raise ValueError(f"not a verb: {V.token_text(token)!r}")
    return GrammarState(slot=slot, verb=token)


def walk(ids: tuple[int, ...] | list[int]) -> list[GrammarState]:
    """The state before each piece of `ids` (ValueError on a piece the grammar forbids)."""
    states, state = [], START
    for token in ids:
        if token not in allowed(state):
            raise ValueError(f"piece {V.token_text(token)!r} not allowed in slot {state.slot!r}")
        states.append(state)
        state = advance(state, token)
    return states


def is_complete(ids: tuple[int, ...] | list[int]) -> bool:
    """True when `ids` is a whole command of the grammar."""
    try:
        states = walk(ids)
    except ValueError:
        return False
    return bool(states) and advance(states[-1], ids[-1]) == DONE


def render(ids: tuple[int, ...] | list[int]) -> str:
    """The shell command text of a completion (specials render as nothing)."""
    return "".join(V.token_text(t) if t >= V.BYTE_OFFSET else V.PIECES[t].text for t in ids
                   if t >= V.BYTE_OFFSET or V.PIECES[t].kind != "special")


def parse_command(text: str) -> tuple[int, ...] | None:
    """The unique complete completion rendering to `text`, or None if there is none."""
    return _parse(text, 0, START)


def parse_prefix(text: str) -> tuple[int, ...] | None:
    """The pieces of a completion cut off before it finished (`finish_reason` "length"), or None.

    Stops as soon as the text is used up, so a cut that fell right after a zero-width piece
    (the empty `new:` fragment) is the one case this cannot recover.
    """
    return _parse(text, 0, START, cut=True) if text else None


def _parse(text: str, pos: int, state: GrammarState, cut: bool = False) -> tuple[int, ...] | None:
    """Pieces rendering exactly text[pos:]; complete (ending in DONE) unless `cut`."""
    if cut and pos == len(text):
        return ()
    if state == DONE:
        return () if pos == len(text) else None
    for token in sorted(allowed(state), key=lambda t: -len(_text(t))):
        piece_text = _text(token)
        if token == V.SUBMIT or not text.startswith(piece_text, pos):
            continue
        rest = _parse(text, pos + len(piece_text), advance(state, token), cut)
        if rest is not None:
            return (token,) + rest
    return None


def _text(token: int) -> str:
    return V.token_text(token) if token >= V.BYTE_OFFSET else V.PIECES[token].text


@dataclass(frozen=True)
class Substitution:
    """One `Ls/OLD/NEW/[g]` of an edit, fragments as indices into `vocab.FRAGMENTS`."""

    line: int
    old: int
    new: int
    occurrence: int = 1  # 1: first match, 2: second match, 0: every match (the /g flag)


def occurrence_of(flag: int) -> int:
    """Which match a flag piece substitutes: 1, 2, or 0 for every match."""
    return (1, 2, 0)[FLAG_IDS.index(flag)]


@dataclass(frozen=True)
class Command:
    """A completion decoded into its choices (`file`: the path it names, '' for none)."""

    verb: int
    file: str = ""
    first: int = 0
    last: int = 0
    subs: tuple[Substitution, ...] = ()
    then_test: bool = False


def decode(ids: tuple[int, ...] | list[int]) -> Command | None:
    """The structured command of a complete grammar completion, else None."""
    if not is_complete(ids):
        return None
    lines = [V.line_of(t) for t in ids if t < V.BYTE_OFFSET and V.PIECES[t].kind == "line"]
    subs = _substitutions(ids, lines)
    return Command(
        verb=ids[0], file=V.path_text(ids),
        first=lines[0] if lines else 0, last=lines[-1] if lines else 0, subs=subs,
        then_test=any(t < V.BYTE_OFFSET and V.PIECES[t].kind == "suffix" for t in ids),
    )


def _substitutions(ids: tuple[int, ...] | list[int], lines: list[int]) -> tuple[Substitution, ...]:
    if ids[0] != EDIT_ID:
        return ()
    kinds = [V.PIECES[t].kind if t < V.BYTE_OFFSET else "byte" for t in ids]
    olds = [V.fragment_of(t) for t, k in zip(ids, kinds) if k == "old"]
    news = [V.fragment_of(t) for t, k in zip(ids, kinds) if k == "new"]
    flags = [occurrence_of(t) for t, k in zip(ids, kinds) if k == "flag"]
    return tuple(Substitution(*fields) for fields in zip(lines, olds, news, flags))
