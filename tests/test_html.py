"""``--html FILE``: one self-contained page, checked as written and opened in headless Chromium:
no console error, every figure decoded, the tables sort on a click."""

import base64
import json
import math
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest
from cli_helpers import run_cli
from PIL import Image

import npusim

MODEL = ["mtcnn-rnet", "--density", "0.5"]
ARCHS = ["systolic-32x32-ws", "sparse-pairs-32x32"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]

# Put into a copy of the report by the test (never part of the report): record errors from
# the start, and once loaded, each image's state and each cycles column's order after one
# click and after a second, as JSON in <pre id="test-out"> for --dump-dom.
PROBE_HEAD = """<script>
window.__errors = [];
window.addEventListener('error', function (e) { __errors.push(String(e.message)); });
var __ce = console.error;
console.error = function () {
  __errors.push([].join.call(arguments, ' ')); __ce.apply(console, arguments); };
</script>"""
PROBE_TAIL = """<script>
function __column(t, col) {
  return Array.prototype.map.call(t.tBodies[0].rows, function (r) {
    return [r.cells[0].textContent, r.cells[col].dataset.v]; });
}
window.addEventListener('load', function () {
  var out = {errors: __errors, images: [], sorts: {}};
  document.querySelectorAll('img').forEach(function (i) {
    out.images.push([i.alt, i.complete, i.naturalWidth, i.naturalHeight]); });
  document.querySelectorAll('table.sortable').forEach(function (t) {
    var res = {};
    t.querySelectorAll('th').forEach(function (h, col) {
      if (!/cycles$|util %$/.test(h.textContent)) return;
      h.click(); var up = __column(t, col);
      h.click(); var down = __column(t, col);
      res[h.textContent] = [up, down];
    });
    out.sorts[t.id] = res;
  });
  var pre = document.createElement('pre');
  pre.id = 'test-out'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """{'run': (html, json), 'compare': (html, json)} written by the command line."""
    tmp = tmp_path_factory.mktemp("html")
    code, _, err = run_cli("run", *MODEL, "--arch", ARCHS[1], "-q", "--html", tmp / "run.html",
                        "--json", tmp / "run.json")
    assert code == 0, err
    code, _, err = run_cli("compare", *MODEL, *[f for a in ARCHS for f in ("--arch", a)], "-q",
                        "--html", tmp / "cmp.html", "--json", tmp / "cmp.json")
    assert code == 0, err
    return {k: ((tmp / f"{k}.html").read_text(), json.loads((tmp / f"{k}.json").read_text()))
            for k in ("run", "cmp")}


class _Refs(HTMLParser):
    """Every attribute that could load something, every tag name, the img sources."""

    def __init__(self):
        super().__init__()
        self.refs, self.tags, self.images = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for key, value in attrs:
            if key in ("src", "href", "srcset", "data") or (value and "url(" in value):
                self.refs.append(value)
        if tag == "img":
            self.images.append(dict(attrs)["src"])


@pytest.mark.parametrize("kind", ["run", "cmp"])
def test_page_is_self_contained_with_every_figure(reports, kind, tmp_path):
    page, doc = reports[kind]
    refs = _Refs()
    refs.feed(page)
    assert refs.refs and all(r.startswith("data:image/png;base64,") for r in refs.refs)
    assert "link" not in refs.tags and "iframe" not in refs.tags
    assert not re.search(r"https?://", page)
    assert len(refs.images) == 5  # cycles, roofline, utilisation, density, units
    for i, src in enumerate(refs.images):
        path = tmp_path / f"{i}.png"
        path.write_bytes(base64.b64decode(src.split(",", 1)[1]))
        with Image.open(path) as im:
            im.verify()
    values = re.findall(r'data-v="([^"]*)"', page)
    assert values and all(math.isfinite(float(v)) for v in values)  # what the sort reads
    assert f"npusim {npusim.__version__}" in page
    archs = [a["label"] for a in doc["archs"]] if kind == "cmp" else [doc["arch"]["name"]]
    for name in archs:
        assert name in page
    assert "sparse-pairs processor_groups=32" in page  # the dataflow's parameters


def _browser(path, *extra: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Chromium headless on ``path`` with a fresh profile; stderr holds its log."""
    profile = path.parent / f"profile-{path.stem}"
    return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                           "--enable-logging=stderr", "--v=0", *extra, path.as_uri()],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def chromium():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed, and CI must run the browser test "
                        "(.ci/run installs it with apt-get)")
        pytest.skip("chromium is not installed (apt-get install -y chromium); CI runs this")
    return CHROMIUM


@pytest.mark.parametrize("kind", ["run", "cmp"])
def test_browser_loads_it_without_error_shows_every_figure_and_sorts(reports, kind, tmp_path,
                                                                     chromium):
    page, doc = reports[kind]
    probed = page.replace("<head>", "<head>" + PROBE_HEAD, 1).replace(
        "</body>", PROBE_TAIL + "</body>", 1)
    path = tmp_path / f"{kind}.html"
    path.write_text(probed)
    done = _browser(path, "--dump-dom", "--virtual-time-budget=10000")
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []
    match = re.search(r'<pre id="test-out">(.*?)</pre>', done.stdout, re.S)
    assert match, done.stdout[-2000:]
    out = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&")
                     .replace("&lt;", "<").replace("&gt;", ">"))
    assert out["errors"] == []
    assert len(out["images"]) == 5
    for alt, complete, width, height in out["images"]:
        assert complete and width > 300 and height > 200, alt
    layers = doc["layers"]
    if kind == "run":
        expected = {r["name"]: r["cycles"] for r in layers}
        sorts = out["sorts"]["layers"]
        assert set(sorts) == {"compute cycles", "stall cycles", "cycles", "util %"}
        for order, values in zip((1, -1), sorts["util %"], strict=True):
            # numbers in order, then the cells without one ('-', a reshape's), the total last
            shown = [v for _, v in values[:-1]]
            numbers = [float(v) for v in shown if v is not None]
            assert numbers == sorted(numbers, reverse=order < 0) and None in shown
            assert shown == [*shown[:len(numbers)], *[None] * (len(shown) - len(numbers))]
        up, down = sorts["cycles"]
    else:
        expected = {r["name"]: r["archs"][1]["cycles"] for r in layers}
        up, down = out["sorts"]["comparison"][f"{ARCHS[1]} cycles"]
    assert up[-1][0] == "total" and down[-1][0] == "total"  # the total stays last
    assert sorted(name for name, _ in up[:-1]) == sorted(expected)
    assert all(float(v) == expected[name] for name, v in up[:-1] + down[:-1])
    assert [float(v) for _, v in up[:-1]] == sorted(float(v) for v in expected.values())
    assert [float(v) for _, v in down[:-1]] == sorted((float(v) for v in expected.values()),
                                                      reverse=True)


def test_screenshot_shows_the_page(reports, tmp_path, chromium):
    path = tmp_path / "cmp.html"
    path.write_text(reports["cmp"][0])
    shot = tmp_path / "shot.png"
    done = _browser(path, f"--screenshot={shot}", "--window-size=1280,900")
    assert done.returncode == 0, done.stderr[-2000:]
    with Image.open(shot) as im:
        assert im.size == (1280, 900)
        grey = np.asarray(im.convert("L"))
        assert len(np.unique(grey)) > 20  # text and colours, not a blank page


def test_html_on_the_json_path_is_refused(tmp_path):
    code, _, err = run_cli("run", "Resnet18.csv", "-q", "--json", tmp_path / "r",
                        "--html", tmp_path / "r")
    assert code == 2 and "--html" in err and "another report" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", ["run", "compare"])
def test_an_interrupt_while_figures_render_writes_no_report(tmp_path, monkeypatch, command):
    """Drawing and rendering the figures takes seconds; a Ctrl-C (or an error) then left the
    JSON and CSV written and the page and figures not. Now every file is made first: none
    of the set is written, and the run exits 130."""
    from npusim.report import plots

    def interrupted(figure, fmt):
        raise KeyboardInterrupt

    monkeypatch.setattr(plots, "save", interrupted)
    archs = ["--arch", ARCHS[0]] + (["--arch", ARCHS[1]] if command == "compare" else [])
    code, _, err = run_cli(command, "Resnet18.csv", *archs, "-q", "--json", tmp_path / "r.json",
                           "--csv", tmp_path / "r.csv", "--html", tmp_path / "r.html",
                           "--plots", tmp_path / "figs")
    assert code == 130 and "interrupted" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_figures_are_drawn_once_for_the_page_and_the_files(tmp_path, monkeypatch):
    """With --plots and --html each figure is drawn and rendered to PNG once (it was drawn
    twice, once for each), and the page embeds the very PNG written to the folder."""
    from npusim.report import plots

    drawn, rendered = [], []
    figures, save = plots.figures, plots.save
    monkeypatch.setattr(plots, "figures", lambda *a: drawn.append(1) or figures(*a))
    monkeypatch.setattr(plots, "save", lambda f, fmt: rendered.append(fmt) or save(f, fmt))
    code, _, err = run_cli("run", "Resnet18.csv", "-q", "--html", tmp_path / "r.html",
                           "--plots", tmp_path / "figs")
    assert code == 0, err
    pngs = sorted((tmp_path / "figs").glob("*.png"))
    assert len(drawn) == 1 and sorted(rendered) == sorted(["png", "svg"] * len(pngs))
    page = (tmp_path / "r.html").read_text()
    embedded = {base64.b64decode(src.split(",", 1)[1]) for src in
                re.findall(r'src="(data:image/png;base64,[^"]+)"', page)}
    assert embedded == {p.read_bytes() for p in pngs}


def test_vector_ops_util_is_their_lanes_share_as_in_the_terminal_table(reports):
    """The page's util % of each vector op is its element ops over its lanes' cycles, as the
    terminal table's vector unit row is (the page showed 0.0, the MACs' share), recomputed
    from the JSON report; a conv's is its MACs over its multipliers' cycles."""
    page, doc = reports["run"]
    body = page.split('id="layers"', 1)[1].split("</table>", 1)[0]
    rows = {cells[0]: cells for cells in (re.findall(r"<td[^>]*>([^<]*)</td>", row)
                                          for row in body.split("<tr")[2:])}
    lanes = doc["arch"]["vector"]["lanes"]
    vectors = [r for r in doc["layers"] if r["dataflow"] == "vector"]
    assert vectors
    for r in doc["layers"]:
        if r["dataflow"] == "vector" and not r["cycles"]:  # a reshape: no lanes' work
            assert rows[r["name"]][8] == "-"
            continue
        share = (r["vector_ops"] / (lanes * r["cycles"]) if r["dataflow"] == "vector"
                 else r["macs"] / r["pe_cycles"])
        assert rows[r["name"]][8] == f"{100 * share:.1f}", r["name"]
