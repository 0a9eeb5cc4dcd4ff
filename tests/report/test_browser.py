"""The report in a real headless browser (Debian's chromium): every image loads, and a
screenshot of the page is drawn. Skipped only when chromium is absent outside CI."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from rl_daytona.report import write_report
from tests.report.runs import make_train_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("chromium is not installed (.ci/run installs it)", allow_module_level=True)

# after load, write what the browser made of every <img> into the DOM, for --dump-dom to show
_PROBE = ('<script>window.addEventListener("load", () => { const p = document.createElement("pre");'
          ' p.id = "imgcheck"; p.textContent = JSON.stringify([...document.images].map('
          'i => ({alt: i.alt, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight})));'
          ' document.body.appendChild(p); });</script>')


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None, "chromium must be installed in CI (.ci/run installs it)"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_every_image_loads_and_the_page_renders(tmp_path: Path) -> None:
    report = write_report(make_train_run(tmp_path / "tr"))
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace("</body>", _PROBE + "</body>"))
    dumped = _chromium(tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="imgcheck">(.*?)</pre>', dumped.stdout, re.S)
    assert found, f"no probe result in the dumped DOM (rc {dumped.returncode}): {dumped.stderr[-500:]}"
    images = json.loads(found.group(1))
    assert len(images) == 5
    assert all(i["complete"] and i["w"] > 0 and i["h"] > 0 for i in images), images

    shot = tmp_path / "shot.png"
    done = _chromium(tmp_path / "profile", "--window-size=1100,1400", f"--screenshot={shot}", report.as_uri())
    assert shot.exists(), f"no screenshot (rc {done.returncode}): {done.stderr[-500:]}"
    image = Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
    assert image.size == (1100, 1400)
    assert len(image.getcolors(maxcolors=1 << 24) or ()) > 50  # text and figures, not a blank page
