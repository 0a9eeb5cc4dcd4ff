"""The report page: one self-contained HTML file, every figure inline as a PNG data URI.

Invariant: everything taken from the run folder is HTML-escaped; the page needs no network
and no file beside it to render.
"""

from __future__ import annotations

import base64
from html import escape

from rl_daytona.report.load import RunData

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; } td { padding: 3px 12px 3px 0; vertical-align: top; }
td:first-child { color: #555; } img { max-width: 100%; }
.missing { background: #fff4e5; border-left: 4px solid #f0a030; padding: 0.5em 1em; }
.note { color: #777; font-style: italic; }
"""


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def section(title: str, png: bytes | None, note: str) -> str:
    """One figure section; with no figure, the note that says why not."""
    body = (f'<img alt="{escape(title)}" src="{data_uri(png)}">' if png is not None
            else f'<p class="note">Not shown: {escape(note)}.</p>')
    return f'<section><h2>{escape(title)}</h2>\n{body}</section>'


def page(data: RunData, sections: list[str], rows: list[tuple[str, str]]) -> str:
    title = f"rl-daytona report: {data.rundir.name}"
    missing = ""
    if data.missing:
        items = "".join(f"<li>{escape(m)}</li>" for m in data.missing)
        missing = f'<div class="missing"><b>Missing from this run folder</b><ul>{items}</ul></div>'
    table = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in rows)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f'<style>{_STYLE}</style></head><body>\n<h1>{escape(title)}</h1>\n{missing}\n'
            f'<section><h2>Summary</h2><table>{table}</table></section>\n' + "\n".join(sections)
            + "\n</body></html>\n")
