"""`rl-daytona show RUNDIR [--rollout ID]`: one rollout's conversation as the model saw it.

Invariant: read-only. It prints the rollout's stored token ids decoded span by span, each span
marked `trained` (sampled tokens: a datum of this rollout trains exactly these, with their
sampled logprobs) or `not trained` (prompt, tool output, template framing), one block per
datum (segment), then the reward. Nothing is re-rendered: what is shown is what was sampled.
Decoding uses the built-in vocabulary for the built-in policy, else `--tokenizer` (a hub name
or local folder); without one the spans are shown as token counts next to the chat messages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from rich.console import Console
from rich.text import Text

from rl_daytona.learn.segments import split_segments

Decoder = Callable[[Sequence[int]], str]


def find_rollout(rundir: Path, rollout_id: str | None) -> dict[str, Any]:
    """The rollout `rollout_id` of RUNDIR/rollouts.jsonl (default: the first one with tokens)."""
    path = rundir / "rollouts.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (is {rundir} a run folder written by eval or train?)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{path} holds no rollouts")
    if rollout_id is None:
        return next((r for r in rows if r["trajectory"]["token_ids"]), rows[0])
    for row in rows:
        if row["rollout_id"] == rollout_id:
            return row
    some = ", ".join(r["rollout_id"] for r in rows[:3])
    raise ValueError(f"no rollout {rollout_id!r} in {path} ({len(rows)} rollouts, e.g. {some})")


def spans(token_ids: Sequence[int], loss_mask: Sequence[int]) -> Iterator[tuple[bool, list[int]]]:
    """(trained, ids) runs of equal mask."""
    start = 0
    for i in range(1, len(token_ids) + 1):
        if i == len(token_ids) or bool(loss_mask[i]) != bool(loss_mask[start]):
            yield bool(loss_mask[start]), list(token_ids[start:i])
            start = i


def decoder_for(rundir: Path, tokenizer: str | None) -> Decoder | None:
    """The built-in vocabulary for a built-in run, a loaded tokenizer's decode, or None."""
    if tokenizer:
        from rl_daytona.renderers.tokenizer import load_tokenizer

        tok = load_tokenizer(tokenizer)
        return lambda ids: str(tok.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False))
    summary = rundir / "summary.json"
    policy = json.loads(summary.read_text()).get("policy") if summary.is_file() else "builtin"
    if policy == "builtin":
        from rl_daytona.renderers.registry import pick_renderer

        return pick_renderer("builtin", "builtin")[0].decode
    return None


def show(rundir: Path, rollout_id: str | None = None, tokenizer: str | None = None,
         console: Console | None = None) -> dict[str, Any]:
    console = console or Console(highlight=False, soft_wrap=True)
    row = find_rollout(rundir, rollout_id)
    traj = row["trajectory"]
    ids, lps, mask = traj["token_ids"], traj["logprobs"], traj["loss_mask"]
    segments = split_segments(ids, lps, mask, traj.get("segment_starts", []))
    console.print(Text(f"rollout {row['rollout_id']} · task {row['task_id']} · status {row['status']} · "
                       f"reward {row['reward']:.2f} · {traj['turns']} turns · {len(segments)} datum(s) · "
                       f"{sum(mask)} trained of {len(ids)} tokens", style="bold"))
    decode = decoder_for(rundir, tokenizer) if ids else None
    if not ids:
        console.print("no token ids were stored (the endpoint returned none): nothing of this rollout can be trained")
    for number, segment in enumerate(segments, 1):
        console.print(Text(f"═══ datum {number} of {len(segments)} ({len(segment.token_ids)} tokens)", style="bold"))
        for trained, run in spans(segment.token_ids, segment.loss_mask):
            label = f"[{'trained' if trained else 'not trained'} · {len(run)} tokens]"
            console.print(Text(label, style="bold green" if trained else "bold dim"))
            if decode is not None:
                console.print(Text(decode(run), style="green" if trained else ""))
    if decode is None:
        _messages(console, traj["messages"], bool(ids))
    console.print(Text(f"reward {row['reward']:.2f} ({row['status']}"
                       f"{', ' + row['error'] if row.get('error') else ''})", style="bold"))
    return row


def _messages(console: Console, messages: Sequence[dict[str, Any]], had_tokens: bool) -> None:
    if had_tokens:
        console.print("(pass --tokenizer NAME_OR_FOLDER to see the tokens as rendered; the chat messages follow)")
    for message in messages:
        text = message.get("content") or json.dumps(message.get("tool_calls"), ensure_ascii=False)
        console.print(Text(f"── {message.get('role')}", style="bold"))
        console.print(Text(str(text)))
