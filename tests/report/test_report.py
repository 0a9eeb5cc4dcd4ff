"""write_report: one self-contained page per run folder, every figure a decodable PNG."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

from PIL import Image

from rl_daytona.report import report_after_run, write_report
from tests.report.runs import make_eval_run, make_half_run, make_train_run

PNG_URI = re.compile(r'<img alt="([^"]*)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')


def _images(html: str) -> dict[str, bytes]:
    """Every <img> of the page, decoded; fails if any <img> is not an inline PNG."""
    assert html.count("<img") == len(PNG_URI.findall(html))
    return {alt: base64.b64decode(data, validate=True) for alt, data in PNG_URI.findall(html)}


def _assert_drawn(png: bytes) -> None:
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.width > 200 and image.height > 150
    assert len(image.getcolors(maxcolors=1 << 24) or ()) > 20  # axes, text and data, not a blank canvas


def test_eval_report(tmp_path: Path) -> None:
    run = make_eval_run(tmp_path / "ev")
    html = write_report(run).read_text()
    images = _images(html)
    assert set(images) == {"Pass rate per task variant", "Reward spread per group",
                           "Time to usable and phase timings", "Timeline of rollouts by phase"}
    for png in images.values():
        _assert_drawn(png)
    assert images["Reward spread per group"] == (run / "report-spread.png").read_bytes()
    assert "Not shown: an eval run has no training curve." in html
    assert "<td>sandboxes created / forked / deleted</td><td>8 / 3 / 8</td>" in html
    assert "<td>statuses</td><td>infra_error 1, ok 7</td>" in html
    assert ("<td>sandboxes ran on</td><td>daytona at https://sim.test/api, snapshot rl-abc123, warm pool wp-7, "
            "transport ssh</td>") in html
    assert "Missing from this run folder" not in html


def test_train_report(tmp_path: Path) -> None:
    run = make_train_run(tmp_path / "tr")
    html = write_report(run).read_text()
    images = _images(html)
    assert len(images) == 5 and "Training curve" in images
    for png in images.values():
        _assert_drawn(png)
    assert sorted(p.name for p in run.glob("report-*.png")) == [
        "report-curve.png", "report-spread.png", "report-timeline.png", "report-timings.png", "report-variants.png"]
    for row in ("<td>datums</td><td>4</td>", "<td>chunks (forward_backward calls)</td><td>3</td>",
                "<td>bytes sent</td><td>3.9 KB</td>", "<td>5 / 7 / 12</td>", "<td>2 / 2</td>"):
        assert row in html


def test_half_written_report_shows_what_it_can_and_lists_what_is_missing(tmp_path: Path) -> None:
    run = make_half_run(tmp_path / "half")
    html = write_report(run).read_text()
    assert "Missing from this run folder" in html
    assert "summary.json is missing" in html and "rollouts.jsonl is missing" in html
    assert "metrics.jsonl: 1 unreadable line(s) skipped" in html
    images = _images(html)
    assert set(images) == {"Training curve", "Reward spread per group"}
    for png in images.values():
        _assert_drawn(png)
    assert "Not shown: no rollout timings" in html and "Not shown: rollouts carry no start times" in html
    assert "<td>sandboxes created / forked / deleted</td><td>not recorded" in html


def test_a_figure_that_can_no_longer_be_drawn_leaves_no_stale_png(tmp_path: Path) -> None:
    run = make_train_run(tmp_path / "tr")
    write_report(run)
    (run / "rollouts.jsonl").unlink()
    write_report(run)
    assert not (run / "report-timeline.png").exists() and (run / "report-curve.png").exists()


def test_run_folder_text_is_escaped(tmp_path: Path) -> None:
    html = write_report(make_eval_run(tmp_path / "<b>x")).read_text()
    assert "<b>x" not in html and "&lt;b&gt;x" in html


def test_report_after_run_never_raises(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert report_after_run(tmp_path) is None
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("report not written: NotARunFolder")
    assert report_after_run(make_eval_run(tmp_path / "ev")) == tmp_path / "ev" / "report.html"
