"""The command grammar: which piece may come next, so every completion is a valid command.

Invariant: `allowed(state)` depends only on the pieces of the completion so far, and every
path from `START` to `DONE` renders a valid shell command (or `<submit>`). Rendering is
injective on complete commands, so `parse_command(render(ids)) == ids`.

Commands:
    <submit>
    python -m pytest -q [--tb=no | -x]                           <eoc>
    (cat | nl -ba | grep -n 'def ' | grep -n 'return') FILE      <eoc>
    (head -n | tail -n) N ' ' FILE                               <eoc>
    sed -n 'A,Bp' FILE           (B >= A)                        <eoc>
    sed -i 'Ls/OLD/NEW(/|/g)' calc.py [&& python -m pytest ...]  <eoc>   (NEW != OLD)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rl_daytona.policy import vocab as V

_ID = V.piece_id
_PYTEST = frozenset(_ID(v) for v in V.PYTEST_VERBS)
_FILE_VIEW = frozenset(_ID(v) for v in V.FILE_VIEW_VERBS)
_COUNT_VIEW = frozenset(_ID(v) for v in V.COUNT_VIEW_VERBS)
VERB_CHOICES: tuple[int, ...] = (V.SUBMIT,) + tuple(_ID(v) for v in V.VERBS)
FILE_IDS: tuple[int, ...] = V.ids_of("file")
FLAG_IDS: tuple[int, ...] = V.ids_of("flag")
SUFFIX_CHOICES: tuple[int, ...] = (V.EOC,) + V.ids_of("suffix")


@dataclass(frozen=True)
class GrammarState:
    """Where a completion is in the grammar, plus the choices later masks depend on."""

    slot: str = "verb"
    verb: int = -1
    line: int = -1
    old: int = -1


START = GrammarState()
DONE = GrammarState(slot="done")

# slot -> (fixed successor slot after any allowed piece) for the simple slots
_NEXT = {
    "count": "space", "space": "file", "file": "end", "range_a": "comma", "comma": "range_b",
    "range_b": "p", "p": "file", "edit_line": "s", "s": "old", "old": "slash", "slash": "new",
    "new": "flag", "flag": "suffix", "end": "done",
}
_GLUE = {"space": " ", "comma": ",", "p": "p' ", "s": "s/", "slash": "/"}


def allowed(state: GrammarState) -> tuple[int, ...]:
    """The piece ids the grammar allows next (empty when the command is done)."""
    slot = state.slot
    if slot == "verb":
        return VERB_CHOICES
    if slot in ("count", "range_a", "edit_line"):
        return V.LINE_IDS
    if slot == "range_b":
        return V.LINE_IDS[state.line - 1:]
    if slot in _GLUE:
        return (_ID(_GLUE[slot]),)
    chooser = _SLOT_CHOICES.get(slot)
    return chooser(state) if chooser else ()


def _new_choices(state: GrammarState) -> tuple[int, ...]:
    old_fragment = V.fragment_of(state.old)
    return tuple(t for t in V.NEW_IDS if V.fragment_of(t) != old_fragment)


_SLOT_CHOICES = {
    "file": lambda s: FILE_IDS, "old": lambda s: V.OLD_IDS, "new": _new_choices,
    "flag": lambda s: FLAG_IDS, "suffix": lambda s: SUFFIX_CHOICES, "end": lambda s: (V.EOC,),
}


def advance(state: GrammarState, token: int) -> GrammarState:
    """The state after appending `token` (which must be allowed)."""
    if state.slot == "verb":
        return _after_verb(token)
    if state.slot in ("range_a", "edit_line"):
        return replace(state, slot=_NEXT[state.slot], line=V.line_of(token))
    if state.slot == "old":
        return replace(state, slot="slash", old=token)
    if state.slot == "suffix":
        return DONE if token == V.EOC else replace(state, slot="end")
    return replace(state, slot=_NEXT[state.slot]) if _NEXT[state.slot] != "done" else DONE


def _after_verb(token: int) -> GrammarState:
    if token == V.SUBMIT:
        return DONE
    if token in _PYTEST:
        slot = "end"
    elif token in _FILE_VIEW:
        slot = "file"
    elif token in _COUNT_VIEW:
        slot = "count"
    elif token == _ID(V.RANGE_VIEW_VERB):
        slot = "range_a"
    else:
        slot = "edit_line"
    return GrammarState(slot=slot, verb=token)


def walk(ids: tuple[int, ...] | list[int]) -> list[GrammarState]:
    """The state before each piece of `ids` (raises ValueError on a disallowed piece)."""
    states, state = [], START
    for token in ids:
        if token not in allowed(state):
            raise ValueError(f"piece {V.token_text(token)!r} not allowed in slot {state.slot!r}")
        states.append(state)
        state = advance(state, token)
    return states


def render(ids: tuple[int, ...] | list[int]) -> str:
    """The shell command text of a completion (specials render as nothing)."""
    return "".join(V.PIECES[t].text for t in ids if V.PIECES[t].kind != "special")


def is_submit(ids: tuple[int, ...] | list[int]) -> bool:
    return len(ids) > 0 and ids[0] == V.SUBMIT


def parse_command(text: str) -> tuple[int, ...] | None:
    """The unique complete completion rendering to `text`, or None if there is none."""
    return _parse(text, 0, START)


def _parse(text: str, pos: int, state: GrammarState) -> tuple[int, ...] | None:
    if state == DONE:
        return () if pos == len(text) else None
    choices = allowed(state)
    for token in sorted(choices, key=lambda t: -len(V.PIECES[t].text)):
        piece = V.PIECES[token]
        if piece.kind == "special" and token != V.EOC:
            continue
        if text.startswith(piece.text, pos):
            rest = _parse(text, pos + len(piece.text), advance(state, token))
            if rest is not None:
                return (token,) + rest
    return None
