"""The HTML reports render in a real headless browser (Debian's chromium) at 1,280 and 1,920 px
without horizontal overflow: neither the page nor any table is wider than its container.

Each report is copied with a small probe script appended (the report itself has no JavaScript);
chromium loads it, the probe writes the page's and every table's widths into the DOM, and
``--dump-dom`` hands them back. A real ``--screenshot`` is taken at each width too. A control page
with a deliberately over-wide table proves the probe catches overflow.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ebb.demo.report import FleetSample, LiveRun, live_policy_run
from ebb.score.report import write_report

WIDTHS = (1280, 1920)
LONG_SPEC = ("ebb:profile=balanced,canary=on,min=1,max=4,budget=0.001,slack_fraction=0.5,target_util=0.9,"
             "forecast=on,fast_path=on,tail=on,level_peak=off")
_PROBE = """<script>addEventListener("load",function(){var d=document.documentElement,r={page:[d.scrollWidth,
d.clientWidth],tables:[]};document.querySelectorAll("table").forEach(function(t){var p=t.parentElement;
r.tables.push({table:Math.ceil(t.getBoundingClientRect().width),container:p.clientWidth,
container_scroll:p.scrollWidth,head:t.rows.length?t.rows[0].textContent.slice(0,40):""});});
var o=document.createElement("pre");o.id="ebb-overflow";o.textContent=JSON.stringify(r);
document.body.appendChild(o);});</script>"""


def _chromium(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    # --no-sandbox: CI runs as root, where chromium's sandbox refuses to start.
    return subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--virtual-time-budget=3000", *args], capture_output=True, text=True, timeout=120)


def _layout(binary: str, page: Path, width: int, tmp: Path) -> dict[str, Any]:
    probed = tmp / f"probed-{width}-{page.name}"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    res = _chromium(binary, f"--window-size={width},1000", "--dump-dom", probed.as_uri())
    found = re.search(r'<pre id="ebb-overflow">(.*?)</pre>', res.stdout, flags=re.S)
    assert found is not None, f"chromium returned no layout for {page} (rc {res.returncode}): {res.stderr[-2000:]}"
    layout: dict[str, Any] = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    return layout


def _overflows(layout: dict[str, Any]) -> list[str]:
    out = []
    scroll, client = layout["page"]
    if scroll > client:
        out.append(f"page is {scroll} px wide in a {client}-px window")
    for t in layout["tables"]:
        if t["table"] > t["container"] or t["container_scroll"] > t["container"]:
            out.append(f"table {t['head']!r} is {t['table']} px wide in a {t['container']}-px container")
    return out


def _screenshot(binary: str, page: Path, width: int, tmp: Path) -> Path:
    shot = tmp / f"{page.stem}-{width}.png"
    res = _chromium(binary, f"--window-size={width},2400", f"--screenshot={shot}", page.as_uri())
    assert shot.exists(), f"no screenshot of {page} at {width} px: {res.stderr[-2000:]}"
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">I", png[16:20])[0] == width  # IHDR width
    return shot


@pytest.fixture(scope="module")
def simulate_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`ebb simulate` on the bundled azure-code slice (fluid, so it stays short), with a long Ebb spec."""
    out = tmp_path_factory.mktemp("sim") / "report.html"
    res = subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", "simulate",
                          "--trace", "azure-code", "--fidelity", "fluid", "--peak-replicas", "4", "--quiet",
                          "--ledger", "", "--policy", f"hpa:target=0.5,keda,static,ebb,{LONG_SPEC},oracle",
                          "--report", str(out)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "COLUMNS": "80"})
    assert res.returncode == 0, res.stdout + res.stderr
    return out


@pytest.fixture(scope="module")
def live_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The live demo's report for a run under a long policy spec (the renderer ``ebb demo --live`` uses)."""
    rng = np.random.default_rng(0)
    n = 400
    sent = np.sort(rng.uniform(0, 300, n))
    ttft = rng.lognormal(5, 0.6, n)
    run = LiveRun(policy=LONG_SPEC, trace="azure-code [0 s +300 s, x1] with a long description of the slice",
                  sent_s=sent, ok=np.ones(n, dtype=np.bool_), ttft_ms=ttft, e2e_ms=ttft * 8,
                  fleet=[FleetSample(t, 1 + int(t // 100), 1 + int(t // 100)) for t in range(0, 300, 5)],
                  decisions=((100.0, 1, 2), (200.0, 2, 3)), duration_s=300.0)
    out = tmp_path_factory.mktemp("live") / "live.html"
    write_report(out, [live_policy_run(run)], title="Ebb live demo — what really happened", trace_desc=run.trace,
                 settings={"source": "replay", "policy": LONG_SPEC, "requests sent": f"{n:,}"})
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_the_simulate_report_fits_the_window_with_no_table_overflowing(
        chromium_binary_path: str, simulate_report: Path, width: int, tmp_path: Path) -> None:
    layout = _layout(chromium_binary_path, simulate_report, width, tmp_path)
    assert len(layout["tables"]) >= 4  # the grouped scorecard tables and the settings
    assert _overflows(layout) == []
    _screenshot(chromium_binary_path, simulate_report, width, tmp_path)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_live_report_with_a_long_policy_spec_fits_the_window(
        chromium_binary_path: str, live_report: Path, width: int, tmp_path: Path) -> None:
    layout = _layout(chromium_binary_path, live_report, width, tmp_path)
    assert layout["tables"] and _overflows(layout) == []
    _screenshot(chromium_binary_path, live_report, width, tmp_path)


def test_the_probe_catches_a_table_wider_than_its_container(chromium_binary_path: str, tmp_path: Path) -> None:
    wide = tmp_path / "wide.html"
    cells = "".join(f"<td>{'9' * 12}</td>" for _ in range(40))
    wide.write_text(f"<!DOCTYPE html><html><body style='max-width:1000px'><div><table><tr>{cells}</tr></table>"
                    "</div></body></html>", encoding="utf-8")
    problems = _overflows(_layout(chromium_binary_path, wide, 1280, tmp_path))
    assert any("table" in p for p in problems) and any("page" in p for p in problems)
