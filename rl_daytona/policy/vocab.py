"""The built-in policy's fixed vocabulary: command pieces, role markers, then 256 byte tokens.

Invariant: ids never change meaning. Piece ids come first (in the order of the tables below),
byte `b` is token `BYTE_OFFSET + b`. A completion holds piece ids, plus byte tokens only where
it spells a file path (the files come from the task, so they are not pieces); everything the
policy reads but did not write (system/user/tool text) is text-piece and byte tokens
(`encode_text`, ids from `TEXT_OFFSET`) after a role marker.
Every token has one fixed text, so a completion's command text is the concatenation of its
tokens' texts, and nothing in the vocabulary names a file or a bug of any one taskset.

Edit fragments come twice: as `old:` pieces (rendered as a GNU sed BRE that matches the
fragment as a whole word/operator) and as `new:` pieces (rendered as a sed replacement).
`FRAGMENT_REGEX[f]` is the Python regex with exactly the sed pattern's meaning and
`replacement_text` what sed writes, so the policy can replay its own edits on the source it
has seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

SPECIALS: tuple[str, ...] = ("<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<eoc>", "<submit>")

# Verbs: the first piece of every command (besides <submit>).
# The compact test run: only the failing tests' node ids (their messages cut off) and the counts.
PYTEST_COMPACT = ("python -m pytest -q --tb=no -p no:cacheprovider 2>&1 "
                  "| grep -E '^(FAILED|ERROR)|[0-9] (passed|failed|error)' | sed 's/ - .*//'")
# The quick test run: every `test*` function of every test_*.py called in one plain Python
# process (no pytest import: ~1/5 of pytest's CPU), printed the way the compact run prints.
# It knows no fixtures or parametrize: the grader's full pytest run is what pays.
QUICK_TEST = """python -c '
import sys,glob,importlib.util as u
sys.path.insert(0,".");f=p=0
for t in sorted(glob.glob("**/test_*.py",recursive=True)):
 try:
  s=u.spec_from_file_location("t%d"%(f+p),t);m=u.module_from_spec(s);s.loader.exec_module(m)
 except Exception:
  print("ERROR",t);f+=1;continue
 for n,g in list(vars(m).items()):
  if n.startswith("test") and callable(g):
   try:g();p+=1
   except Exception:print("FAILED %s::%s"%(t.split("/")[-1],n));f+=1
print("%d failed, %d passed"%(f,p))'"""
PYTEST_VERBS: tuple[str, ...] = (
    QUICK_TEST,
    PYTEST_COMPACT,
    "python -m pytest -q",
    "python -m pytest -q -x",
)
# Every Python source of the workspace (tests left out), numbered under a `==> path <==` header,
# then the failing tests: the whole picture in one sandbox command.
SOURCES_FIND = ("find . -name '*.py' ! -name 'test_*' ! -name '*_test.py' ! -name conftest.py "
                "! -path '*/tests/*' ! -path '*/.*' -printf '%P\\n' | sort")
NUMBERED_AWK = "awk 'FNR==1{print \"==> \" FILENAME \" <==\"} NF{print FNR\"\\t\"$0}' "
LOOK_VERB = f"{NUMBERED_AWK}/dev/null $({SOURCES_FIND}); {QUICK_TEST}"
FILE_VIEW_VERBS: tuple[str, ...] = ("cat ", "nl -ba ", "grep -n 'def ' ", "grep -n 'return' ")
COUNT_VIEW_VERBS: tuple[str, ...] = ("head -n ", "tail -n ")
RANGE_VIEW_VERB = "sed -n '"
EDIT_VERB = "f="  # f=PATH; sed -i '...' "$f": the file is chosen before the lines it edits
VERBS: tuple[str, ...] = PYTEST_VERBS + (LOOK_VERB,) + FILE_VIEW_VERBS + COUNT_VIEW_VERBS + (RANGE_VIEW_VERB, EDIT_VERB)

# Paths are spelled in byte tokens (any file the task names); these bytes may appear in one.
PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-")
MAX_LINE = 200
LINES: tuple[str, ...] = tuple(str(i) for i in range(1, MAX_LINE + 1))
# Fixed glue between the choices of a command.
EDIT_OPEN = "; sed -i '"
GLUE: tuple[str, ...] = (" ", ",", "p' ", "s/", "/", EDIT_OPEN)
EDIT_FLAGS: tuple[str, ...] = ("/", "/2", "/g")  # first, second, every occurrence
EDIT_SEPARATORS: tuple[str, ...] = (";", "' \"$f\"")
MAX_SUBSTITUTIONS = 6
EDIT_SUFFIXES: tuple[str, ...] = (f" && {QUICK_TEST}", f" && {PYTEST_COMPACT}")

# A general set of Python fragments an edit can replace (nothing of any one taskset). The empty
# fragment is the end of the line: as `old` it appends, as `new` it deletes. Three old-only
# fragments are patterns over the source ("<call>": the first `name(args)` without nested
# parentheses, "<pair>": a two-argument list, "<calls>": from the first called name to the
# last one on the line), and the new-only templates rebuild what they matched (`&` is the
# match: "(& - 1)" turns `len(xs)` into `(len(xs) - 1)`; "\\3(\\2\\1(" swaps the first and last
# called names: `min(a, max(b, c))` -> `max(a, min(b, c))`).
EOL = ""
CALL, PAIR, CALLS = "<call>", "<pair>", "<calls>"
FRAGMENT_KINDS: dict[str, tuple[str, ...]] = {
    "compare": (" < ", " <= ", " > ", " >= ", " == ", " != "),
    "arith": (" + ", " - ", " * ", " / ", " // ", " % ", " ** "),
    "assign": (" = ", " += ", " -= ", " *= ", " /= "),
    "logic": (" and ", " or ", "not ", " in ", " not in ", " is ", " is not "),
    "int": ("0", "1", "2", "3", "4", "5", "10", "100", "-1"),
    "float": ("0.0", "0.5", "1.0", "2.0", "1e-9"),
    "const": ("True", "False", "None"),
    "str": ("''", "' '", "','", "'-'", "'_'"),
    "builtin": ("min", "max", "sum", "abs", "len", "round", "int", "float", "sorted", "any", "all",
                "lower", "upper", "startswith", "endswith", "append", "extend"),
    "offset": (" + 1", " - 1", " + 2", " * 2", " / 2", " // 2"),
    "index": ("[0]", "[-1]", "[1]", "[-2]", "[1:]", "[:-1]"),
    "call": (CALL,),
    "pair": (PAIR,),
    "calls": (CALLS,),
    "wrap": ("(& - 1)", "(& + 1)", "& - 1", "& + 1"),
    "swap": ("(\\2, \\1)", "\\3(\\2\\1("),
    "eol": (EOL,),
}
FRAGMENTS: tuple[str, ...] = tuple(f for kind in FRAGMENT_KINDS.values() for f in kind)
FRAGMENT_KIND: tuple[str, ...] = tuple(k for k, frags in FRAGMENT_KINDS.items() for _ in frags)
KINDS: tuple[str, ...] = tuple(FRAGMENT_KINDS)
OLD_ONLY_KINDS = frozenset({"call", "pair", "calls"})
NEW_ONLY_KINDS = frozenset({"wrap", "swap"})
# Patterns (GNU sed BRE, Python regex) of the old-only fragments.
_PATTERNS: dict[str, tuple[str, str]] = {
    CALL: (r"[A-Za-z_][A-Za-z0-9_.]*([^()]*)", r"[A-Za-z_][\w.]*\([^()]*\)"),
    PAIR: (r"(\([^,()]*\), \([^,()]*\))", r"\(([^,()]*), ([^,()]*)\)"),
    # The first called name is the leftmost match's start (so a whole name), the last one the
    # longest match's end: sed's leftmost-longest and Python's greedy `.*` agree on both.
    CALLS: (r"\([A-Za-z_][A-Za-z0-9_]*\)(\(.*\)\b\([A-Za-z_][A-Za-z0-9_]*\)(",
            r"([A-Za-z_][A-Za-z0-9_]*)\((.*)\b([A-Za-z_][A-Za-z0-9_]*)\("),
}
# Kinds a fragment can plausibly be replaced by (a kind is always compatible with itself).
COMPATIBLE_KINDS: tuple[frozenset[str], ...] = (
    frozenset({"logic", "compare"}), frozenset({"int", "float", "const"}), frozenset({"offset", "eol"}),
    frozenset({"call", "wrap"}), frozenset({"pair", "calls", "swap"}), frozenset({"builtin"}), frozenset({"str"}),
)


@lru_cache(maxsize=None)
def kinds_compatible(a: str, b: str) -> bool:
    return a == b or any(a in group and b in group for group in COMPATIBLE_KINDS)


def fragment_name(fragment: str) -> str:
    return fragment if fragment != EOL else "<eol>"


def _word_bounded(fragment: str, body: str) -> str:
    """Wrap `body` in word boundaries where the fragment starts/ends with a word character."""
    left = r"\b" if re.match(r"\w", fragment) else ""
    right = r"\b" if re.search(r"\w$", fragment) else ""
    return f"{left}{body}{right}"


def _shell_quoted(text: str) -> str:
    """Text as it goes inside the command's single-quoted sed script."""
    return text.replace("'", "'\\''")


def sed_pattern(fragment: str) -> str:
    """The fragment as a GNU sed BRE (delimiter '/') matching it as a whole token."""
    if fragment == EOL:
        return "$"
    if fragment in _PATTERNS:
        return _PATTERNS[fragment][0]
    body = re.sub(r"([.\[\]*^$\\/])", r"\\\1", fragment)
    return _shell_quoted(_word_bounded(fragment, body))


def sed_replacement(fragment: str) -> str:
    """The fragment as a sed replacement text (delimiter '/'); templates keep `&` and `\\N`."""
    if fragment in _TEMPLATES:
        return fragment
    return _shell_quoted(re.sub(r"([\\&/])", r"\\\1", fragment))


def python_regex(fragment: str) -> str:
    """The Python regex meaning exactly what `sed_pattern(fragment)` means (a template as old
    matches nothing)."""
    if fragment == EOL:
        return "$"
    if fragment in _PATTERNS:
        return _PATTERNS[fragment][1]
    if fragment in _TEMPLATES:
        return "(?!)"
    return _word_bounded(fragment, re.escape(fragment))


def replacement_text(fragment: str, match: re.Match[str]) -> str:
    """What sed writes in place of `match` for the `new:` fragment (a template naming a group
    the pattern lacks is an error to sed, which then edits nothing: the match stays)."""
    if fragment not in _TEMPLATES:
        return fragment
    if any(int(g) > (match.re.groups or 0) for g in re.findall(r"\\(\d)", fragment)):
        return match.group(0)
    return re.sub(r"&|\\(\d)", lambda m: match.group(int(m.group(1) or 0)), fragment)


_TEMPLATES = frozenset(f for kind in NEW_ONLY_KINDS for f in FRAGMENT_KINDS[kind])


@dataclass(frozen=True)
class Piece:
    """One vocabulary entry: its id, its rendered text and what kind of choice it is."""

    id: int
    text: str
    kind: str  # special | verb | line | glue | old | new | flag | sep | suffix
    name: str


def _build_pieces() -> tuple[Piece, ...]:
    table: list[tuple[str, str, str]] = []
    table += [("special", "" if s in ("<eoc>",) else s, s) for s in SPECIALS]
    table += [("verb", v, v) for v in VERBS]
    table += [("line", s, s) for s in LINES]
    table += [("glue", g, g) for g in GLUE]
    table += [("old", sed_pattern(f), f"old:{fragment_name(f)}") for f in FRAGMENTS]
    table += [("new", sed_replacement(f), f"new:{fragment_name(f)}") for f in FRAGMENTS]
    table += [("flag", f, f"flag:{f}") for f in EDIT_FLAGS]
    table += [("sep", s, f"sep:{s}") for s in EDIT_SEPARATORS]
    table += [("suffix", s, s) for s in EDIT_SUFFIXES]
    return tuple(Piece(i, text, kind, name) for i, (kind, text, name) in enumerate(table))


PIECES: tuple[Piece, ...] = _build_pieces()
BYTE_OFFSET: int = len(PIECES)

# Text pieces: what the policy reads (system, user and tool text) is encoded greedily, longest
# piece first, with bytes for the rest, as a BPE tokenizer would: Python keywords, builtins and
# operators, indentation, test-runner words, two-digit numbers (listing line numbers). Generic,
# nothing of one taskset; the text a token sequence decodes to is unchanged, so what the policy
# observes (and so every decision) is the same as with bytes alone, in about half the tokens.
TEXT_PIECES: tuple[str, ...] = tuple(dict.fromkeys((
    "    ", "        ", "            ", "\n    ", "\n        ",
    "def ", "return ", "if ", "elif ", "else:", "for ", " in ", "while ", "import ", "from ", "class ",
    "with ", " as ", "try:", "except ", "except:", "raise ", "assert ", "lambda ", "yield ", " and ",
    " or ", "not ", " is ", "None", "True", "False", "pass", "break", "continue", "self", "global ",
    " = ", " == ", " != ", " <= ", " >= ", " < ", " > ", " + ", " - ", " * ", " / ", " // ", " % ",
    " ** ", " += ", " -= ", " *= ", "):", "()", "):\n", ", ", "[0]", "[-1]", "[1]", " - 1", " + 1",
    "len(", "sum(", "min(", "max(", "range(", "sorted(", "int(", "str(", "abs(", "list(", "dict(",
    "set(", "zip(", "enumerate(", "isinstance(", "print(", "round(", "float(", "tuple(", "any(",
    "all(", "map(", "filter(", "reversed(", "append(", ".get(", ".join(", ".split(", ".strip(",
    ".lower(", ".upper(", ".items(", ".keys(", ".values(", ".replace(", ".startswith(", ".endswith(",
    "FAILED ", "ERROR ", "PASSED", " passed", " failed", " error", "test_", "tests/", ".py", "::",
    "[exit code ", "]\n", "==> ", " <==", "Traceback", "Error", "Exception",
    "count", "total", "value", "result", "text", "word", "line", "name", "item", "index", "string",
    "length", "number", "first", "last", "empty", "list", "start", "end", "key", "ing", "tion",
    *(str(n) for n in range(10, 100)),
)))
TEXT_OFFSET: int = BYTE_OFFSET + 256
VOCAB_SIZE: int = TEXT_OFFSET + len(TEXT_PIECES)
_TEXT_RE = re.compile("|".join(re.escape(t) for t in sorted(TEXT_PIECES, key=len, reverse=True)) + "|.",
                      re.DOTALL)
_TEXT_ID = {t: TEXT_OFFSET + i for i, t in enumerate(TEXT_PIECES)}
_BY_NAME: dict[str, int] = {p.name: p.id for p in PIECES}


def piece_id(name: str) -> int:
    """The id of a piece by name (`'cat '`, `'17'`, `'old: < '`, `'<submit>'`...)."""
    return _BY_NAME[name]


def ids_of(kind: str) -> tuple[int, ...]:
    """Ids of every piece of one kind, in vocabulary order."""
    return tuple(p.id for p in PIECES if p.kind == kind)


def token_text(token_id: int) -> str:
    """Readable text of any token (a byte token shows as its latin-1 character)."""
    if token_id >= TEXT_OFFSET:
        return TEXT_PIECES[token_id - TEXT_OFFSET]
    if token_id >= BYTE_OFFSET:
        return bytes([token_id - BYTE_OFFSET]).decode("latin-1")
    return PIECES[token_id].text if PIECES[token_id].kind != "special" else PIECES[token_id].name


def token_bytes(token_id: int) -> list[int]:
    """UTF-8 bytes of a token as OpenAI's logprobs `bytes` field wants them."""
    if BYTE_OFFSET <= token_id < TEXT_OFFSET:
        return [token_id - BYTE_OFFSET]
    return list(token_text(token_id).encode("utf-8"))


def encode_bytes(text: str) -> list[int]:
    """Byte-level token ids of a text (UTF-8): how a completion spells a path."""
    return [BYTE_OFFSET + b for b in text.encode("utf-8")]


def encode_text(text: str) -> list[int]:
    """Token ids of text the policy reads: text pieces, longest first, and bytes for the rest."""
    return list(_encoded(text))


@lru_cache(maxsize=4096)
def _encoded(text: str) -> tuple[int, ...]:
    """encode_text, kept: a chat's earlier messages are encoded again at every turn."""
    out: list[int] = []
    for match in _TEXT_RE.finditer(text):
        piece = _TEXT_ID.get(match.group())
        if piece is not None:
            out.append(piece)
        else:
            out.extend(BYTE_OFFSET + b for b in match.group().encode("utf-8"))
    return tuple(out)


def decode_bytes(token_ids: list[int] | tuple[int, ...]) -> str:
    """Text of a run of byte and text-piece tokens (command pieces and markers are skipped)."""
    raw = bytearray()
    for t in token_ids:
        if t >= TEXT_OFFSET:
            raw += TEXT_PIECES[t - TEXT_OFFSET].encode("ascii")
        elif t >= BYTE_OFFSET:
            raw.append(t - BYTE_OFFSET)
    return raw.decode("utf-8", errors="replace")


SYSTEM, USER, ASSISTANT, TOOL, EOC, SUBMIT = (piece_id(s) for s in SPECIALS)
ROLE_MARKERS: dict[str, int] = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT, "tool": TOOL}
OLD_IDS: tuple[int, ...] = ids_of("old")
NEW_IDS: tuple[int, ...] = ids_of("new")
LINE_IDS: tuple[int, ...] = ids_of("line")
FRAGMENT_REGEX: tuple[re.Pattern[str], ...] = tuple(re.compile(python_regex(f)) for f in FRAGMENTS)


def fragment_of(token_id: int) -> int:
    """Fragment index of an `old:`/`new:` piece."""
    if token_id in _OLD_INDEX:
        return _OLD_INDEX[token_id]
    return _NEW_INDEX[token_id]


def line_of(token_id: int) -> int:
    """The line number a line piece stands for."""
    return token_id - LINE_IDS[0] + 1


_OLD_INDEX = {t: i for i, t in enumerate(OLD_IDS)}
_NEW_INDEX = {t: i for i, t in enumerate(NEW_IDS)}
PATH_IDS: tuple[int, ...] = tuple(BYTE_OFFSET + ord(c) for c in sorted(PATH_CHARS))
OLD_CHOICES: tuple[int, ...] = tuple(t for t, k in zip(OLD_IDS, FRAGMENT_KIND) if k not in NEW_ONLY_KINDS)
NEW_CHOICES: tuple[int, ...] = tuple(t for t, k in zip(NEW_IDS, FRAGMENT_KIND) if k not in OLD_ONLY_KINDS)


def path_text(ids: list[int] | tuple[int, ...]) -> str:
    """The path spelled by the byte tokens of a completion ('' when none)."""
    return bytes(t - BYTE_OFFSET for t in ids if BYTE_OFFSET <= t < TEXT_OFFSET).decode("ascii", errors="replace")
