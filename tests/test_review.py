"""Review and approval: the terminal view, review.html (escaping, no JS, real browser), and
approval signatures as `read_release` counts them."""

from __future__ import annotations

import base64
import html
import io
import json
import os
import pty
import select
import shutil
import struct
import subprocess
import sys
import time
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from release.config_file import load_config
from release.pipeline import run_release
from selpe_audit.artifact.canonical import canonical_bytes
from selpe_audit.artifact.document import (
    RELEASE_FILE,
    read_release,
    read_release_unverified,
    write_release,
)
from selpe_audit.artifact.signing import SIGNATURES_DIR, generate_keypair, sign_file
from selpe_audit.errors import UserError
from selpe_audit.review.page import REVIEW_FILE, render_review_html, write_review_html
from selpe_audit.review.view import (
    personal_data_hits,
    review_warnings,
    signature_statuses,
    signature_warnings,
)

ROOT = Path(__file__).resolve().parents[1]
EXE = str(Path(sys.executable).with_name("selpe-audit"))
CHROMIUM = Path("/usr/bin/chromium")
XSS = ("<script>alert(1)</script>", '"><img src=x onerror=alert(1)>')


def cli(*args: str, stdin: str | None = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1", COLUMNS="200")
    return subprocess.run([EXE, *args], capture_output=True, text=True, env=env, input=stdin,
                          timeout=300)


# ----- fixtures --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, tuple[Path, Path, str]]:
    d = tmp_path_factory.mktemp("keys")
    return {name: generate_keypair(d / f"{name}.pem") for name in ("release", "reviewer")}


@pytest.fixture(scope="module")
def demo_artifact(tmp_path_factory, keys) -> Path:
    """The demo release, made once with the real pipeline (about 15 s)."""
    d = tmp_path_factory.mktemp("release")
    cfg = load_config(ROOT / "examples" / "release.toml", {
        "data": ROOT / "selpe_audit" / "data" / "ed_triage_sample.csv",
        "schema": ROOT / "selpe_audit" / "data" / "ed_triage.schema.json",
        "out": d / "art", "release_key": keys["release"][0], "lifetime_ledger": d / "ledger",
    })  # checked on construction
    run_release(cfg, Console(file=io.StringIO()))
    return d / "art"


def _record(i: int, complaint: str) -> dict:
    return {"age": 30 + i, "sex": "female", "arrival_mode": "walk-in", "temperature_c": 37.2,
            "heart_rate": 90, "respiratory_rate": 16, "o2_saturation": 97, "systolic_bp": 125,
            "diastolic_bp": 80, "pain_score": 4, "chief_complaint": complaint,
            "disposition": "discharged", "acuity": 3}


def hostile_doc(doc: dict) -> dict:
    """The demo document with attack strings in every kind of text the page shows."""
    doc = json.loads(json.dumps(doc))
    a, b = XSS
    doc["dataset"] = f"demo {a} {b}"
    hists = doc["counts"]["histograms"]
    hists[f"age{a}"] = hists.pop("age")
    hists["sex"]["keys"][0] = b
    doc["counts"]["cohorts"]["cohorts"][0]["name"] = a
    doc["counts"]["rates"][0]["name"] = b
    doc["ledger"]["entries"][0]["scope"] = a
    doc["tool"][b] = a
    doc["schema"]["description"] = b
    bad = dict(_record(1, f"sore throat {a}"), **{b: "x"})
    doc["selection"] = {
        "T": 1, "K": 4, b: a, "embedder": "all-MiniLM-L6-v2",
        "rounds": [{"round": 1, "epsilon": 0.5, "extra": "tolerated", "classes": [
            {"class": 1, "winners": [_record(0, "chest pain radiating to left arm"),
                                     _record(1, "Mr. Smith fell, call 555-123-4567")],
             "partners": [bad, _record(2, "tint \x1b[31mred\x1b[0m \u202egnp.exe")]},
            {"class": 2, "winners": [_record(3, f"{b} cough")], "partners": []},
        ]}],
    }
    return doc


@pytest.fixture(scope="module")
def hostile_artifact(tmp_path_factory, demo_artifact, keys) -> Path:
    d = tmp_path_factory.mktemp("hostile") / "art"
    write_release(d, hostile_doc(read_release_unverified(demo_artifact)), keys["release"][0])
    return d


# ----- the demo artifact, rendered ---------------------------------------------------------

@pytest.mark.slow
def test_review_cli_shows_everything(demo_artifact, keys, tmp_path):
    html_path = tmp_path / "page.html"
    r = cli("review", str(demo_artifact), "--trust", str(keys["release"][1]),
            "--html", str(html_path))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    doc = read_release_unverified(demo_artifact)
    assert f"{keys['release'][2]} │ release key │ verified" in out
    for text in (doc["dataset"], doc["schema_sha256"], "opendp 0.16.0", "privacy ledger",
                 "total", *doc["guarantees"]["statements"][:1], "children", "suppressed"):
        assert text in out
    for name in doc["counts"]["histograms"]:
        assert f"histogram {name}" in out
    assert html_path.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.slow
def test_review_without_trust_lists_signatures_unchecked(demo_artifact):
    r = cli("review", str(demo_artifact))
    assert r.returncode == 0, r.stderr
    assert "unchecked" in r.stdout
    assert (demo_artifact / REVIEW_FILE).exists()


def test_demo_page_holds_every_released_number(demo_artifact):
    doc = read_release_unverified(demo_artifact)
    page = render_review_html(doc)
    assert "derived from <code>release.json</code> and is not itself trusted" in page
    assert "<script" not in page.lower()
    assert "default-src 'none'" in page
    counts = doc["counts"]
    for name, h in counts["histograms"].items():
        assert name in page
        for row in h["dp_counts_by_class"]:
            for v in row:
                assert f">{v}</text>" in page
    for v in counts["class_balance"]["dp_counts"]:
        assert f">{v}</text>" in page
    for e in doc["ledger"]["entries"]:
        assert e["id"] in page
    assert page.count("<svg") >= len(counts["histograms"]) + 3
    for s in doc["guarantees"]["statements"]:
        assert html.escape(s, quote=True) in page


def test_write_review_html_default_path(demo_artifact, tmp_path):
    art = tmp_path / "art"
    shutil.copytree(demo_artifact, art)
    path = write_review_html(art)
    assert path == art / REVIEW_FILE
    assert path.read_text(encoding="utf-8") == render_review_html(read_release_unverified(art))
    assert not list(art.glob(".review.html.*"))  # atomic write left no temporary file


@pytest.mark.slow
def test_review_tolerates_unknown_keys_and_refuses_odd_shapes(demo_artifact, keys, tmp_path):
    """Keys a later format adds, anywhere, still review; a block that is not its record
    (the artifact model's JSON Schema) is refused in one line naming where, not guessed at."""
    doc = read_release_unverified(demo_artifact)
    doc["counts"]["future_block"] = {"dp_counts": [1, 2]}
    doc["counts"]["histograms"]["sex"]["dp_counts_by_class"][0].append(7)  # a count too many
    doc["selection"] = {"new_config": {"x": 1}, "rounds": [{"round": 1, "future": True, "classes": [
        {"class": 1, "winners": [_record(0, "chest pain")], "partners": [], "future": True}]}]}
    write_release(tmp_path / "art", doc, keys["release"][0])
    r = cli("review", str(tmp_path / "art"))
    assert r.returncode == 0, r.stderr

    doc["selection"]["rounds"][0]["classes"][0]["winners"].append("not a record")
    odd = tmp_path / "odd"
    shutil.copytree(tmp_path / "art", odd)
    (odd / RELEASE_FILE).write_bytes(canonical_bytes(doc))
    sign_file(odd, RELEASE_FILE, keys["release"][0])
    r = cli("review", str(odd))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "malformed at selection/rounds/0/classes/0/winners/" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


# ----- escaping -----------------------------------------------------------------------------

ALLOWED_TAGS = {"html", "head", "meta", "link", "title", "style", "body", "header", "div", "h1",
                "h2", "h3", "h4", "p", "strong", "code", "nav", "a", "main", "section", "table",
                "thead", "tbody", "tr", "th", "td", "span", "ul", "li", "svg", "rect", "text",
                "line", "g", "details", "summary", "pre", "footer"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.update(k for k, _ in attrs)


def test_html_escapes_every_text_from_the_artifact(hostile_artifact):
    page = render_review_html(read_release_unverified(hostile_artifact))
    assert "<script" not in page.lower()
    assert "<img" not in page.lower()
    assert '"><img' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    parsed = _Tags()
    parsed.feed(page)
    assert parsed.tags <= ALLOWED_TAGS
    assert not [a for a in parsed.attrs if a.startswith("on")]
    assert "\x1b" not in page and "\u202e" not in page
    assert "\\x1b[31m" in page and "\\u202e" in page


@pytest.mark.slow
def test_terminal_view_shows_control_codes_instead_of_obeying_them(hostile_artifact):
    r = cli("review", str(hostile_artifact))
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout
    assert "\\x1b[31m" in r.stdout
    assert XSS[0] in r.stdout  # shown literally, as text


@pytest.mark.slow
def test_review_counts_warnings_by_kind_and_lists_each_with_all(hostile_artifact):
    doc = read_release_unverified(hostile_artifact)
    ws = review_warnings(doc)
    kinds = {w.kind for w in ws}
    assert len(ws) > len(kinds) >= 2  # some kind fires more than once
    short = cli("review", str(hostile_artifact))
    assert short.returncode == 0, short.stderr
    flat = " ".join(short.stdout.split())  # a long artifact path wraps the hint's line
    assert "counted by kind" in flat and "review --all" in flat
    assert str(hostile_artifact / REVIEW_FILE) in short.stdout.replace("\n", "")
    assert all(k in short.stdout for k in kinds)
    full = cli("review", str(hostile_artifact), "--all")
    assert full.returncode == 0, full.stderr
    flat = " ".join(full.stdout.replace("│", " ").split())
    assert all(" ".join(w.where.split()) in flat for w in ws)
    assert len(full.stdout.splitlines()) > len(short.stdout.splitlines())


# ----- warnings -----------------------------------------------------------------------------

def test_warnings_flag_personal_data_with_reason_and_place(hostile_artifact):
    ws = [w for w in review_warnings(read_release_unverified(hostile_artifact))
          if w.kind == "personal data"]
    got = {(w.where, w.reason.split(":")[0]) for w in ws}
    assert ("round 1, class 1, winner 2, field chief_complaint",
            "looks like a title and name (Mr./Mrs./Dr. Xxx)") in got
    assert ("round 1, class 1, winner 2, field chief_complaint",
            "looks like a phone number") in got
    assert not [w for w in ws if w.where.startswith("round 1, class 1, winner 1,")]


@pytest.mark.parametrize("text,pattern", [
    ("Dr. Jones saw her", "title and name"), ("name: Jane Doe", "name: Xxx Yyy"),
    ("patient Jane Doe fell", "patient Xxx Yyy"), ("jane.doe@example.org", "email"),
    ("+44 20 7946 0958", "phone"), ("seen 03/12/2024", "date"), ("on 2024-03-12", "date"),
    ("born 3.12.84", "date"),
    ("since March 3, 2024", "month name"), ("MRN: 00123456", "MRN"), ("id P000123", "id-like"),
])
def test_personal_data_patterns(text, pattern):
    assert any(pattern in name for name, _ in personal_data_hits(text))


@pytest.mark.parametrize("text", [
    "chest pain for 2 days, HR 120-130", "BP 120/80, temp 38.5", "pain 7/10 since May",
    "fell from 2 m height", "sore throat x 3 days", "O2 94% on 2 L/min", "temp 36.5-37.5",
])
def test_clinical_text_is_not_flagged(text):
    assert personal_data_hits(text) == []


def test_warnings_flag_a_schema_hash_that_does_not_match(demo_artifact, hostile_artifact):
    assert not [w for w in review_warnings(read_release_unverified(demo_artifact))
                if w.kind == "schema"]
    assert [w.where for w in review_warnings(read_release_unverified(hostile_artifact))
            if w.kind == "schema"] == ["schema_sha256"]


def test_warnings_flag_high_epsilon_and_small_counts(demo_artifact):
    doc = read_release_unverified(demo_artifact)
    assert not [w for w in review_warnings(doc) if w.kind == "epsilon"]
    doc["ledger"]["total_epsilon"] = 8.0
    doc["counts"]["class_balance"]["dp_counts"][0] = -3
    ws = review_warnings(doc)
    assert [w.where for w in ws if w.kind == "epsilon"] == ["ledger total"]
    balance = next(w for w in ws if w.where == "class balance")
    assert "1 = -3 (negative)" in balance.reason
    assert "n_min = 10" in "".join(w.reason for w in ws)


# ----- approvals ----------------------------------------------------------------------------

@pytest.fixture
def artifact(demo_artifact, tmp_path) -> Path:
    art = tmp_path / "art"
    shutil.copytree(demo_artifact, art)
    return art


@pytest.mark.slow
def test_approval_counts_only_with_the_reviewer_key_trusted(artifact, keys):
    (_, pub, _), (rpriv, rpub, rkid) = keys["release"], keys["reviewer"]
    with pytest.raises(UserError, match="0 approval"):
        read_release(artifact, [], require_approvals=1, release_key=pub)
    r = cli("approve", str(artifact), "--key", str(rpriv), "--release-key", str(pub), "--yes")
    assert r.returncode == 0, r.stderr
    assert (artifact / SIGNATURES_DIR / f"{rkid}.sig").exists()
    assert read_release(artifact, [rpub], require_approvals=1,
                        release_key=pub).approvals == (rkid,)
    with pytest.raises(UserError, match="0 approval"):
        read_release(artifact, [pub], require_approvals=1, release_key=pub)
    statuses = signature_statuses(artifact, [pub, rpub], read_release_unverified(artifact)
                                  ["release_key_id"])
    assert sorted(s.status for s in statuses) == ["verified", "verified"]


@pytest.mark.slow
def test_approval_over_a_changed_file_does_not_count(artifact, keys):
    (_, pub, _), (rpriv, rpub, rkid) = keys["release"], keys["reviewer"]
    assert cli("approve", str(artifact), "--key", str(rpriv), "--release-key", str(pub),
               "--yes").returncode == 0
    path = artifact / RELEASE_FILE
    data = path.read_bytes()
    path.write_bytes(data.replace(b"ed_triage_demo", b"ed_triage_demX", 1))
    with pytest.raises(UserError, match="does not verify"):
        read_release(artifact, [rpub], require_approvals=1, release_key=pub)
    with pytest.raises(UserError, match="does not verify"):
        read_release(artifact, [rpub])
    doc = read_release_unverified(artifact)
    statuses = signature_statuses(artifact, [pub, rpub], doc["release_key_id"])
    assert {s.key_id: s.status for s in statuses}[rkid] == "INVALID"
    assert [w.kind for w in signature_warnings(doc, statuses)] == ["signature", "signature"]


@pytest.mark.slow
def test_approve_refuses_the_release_key(artifact, keys):
    r = cli("approve", str(artifact), "--key", str(keys["release"][0]), "--release-key",
            str(keys["release"][1]), "--yes")
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and "different key" in r.stderr
    assert "Traceback" not in r.stderr
    assert len(list((artifact / SIGNATURES_DIR).glob("*.sig"))) == 1


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["deleted", "garbage"])
def test_approve_refuses_without_a_valid_release_signature(artifact, keys, damage):
    """Nothing is shown or signed unless the named release key signed these bytes."""
    sig = artifact / SIGNATURES_DIR / f"{keys['release'][2]}.sig"
    if damage == "deleted":
        sig.unlink()
    else:
        sig.write_bytes(b"not a signature")
    r = cli("approve", str(artifact), "--key", str(keys["reviewer"][0]), "--release-key",
            str(keys["release"][1]), "--yes")
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "release key" in r.stderr or "does not verify" in r.stderr
    assert not (artifact / SIGNATURES_DIR / f"{keys['reviewer'][2]}.sig").exists()


def test_approve_without_a_terminal_needs_yes(artifact, keys):
    r = cli("approve", str(artifact), "--key", str(keys["reviewer"][0]), "--release-key",
            str(keys["release"][1]))
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and "--yes" in r.stderr
    assert len(list((artifact / SIGNATURES_DIR).glob("*.sig"))) == 1


@pytest.mark.slow
@pytest.mark.parametrize("answer,signed", [("n", False), ("y", True)])
def test_approve_asks_on_a_terminal(artifact, keys, answer, signed):
    rkid = keys["reviewer"][2]
    leader, follower = pty.openpty()
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1", COLUMNS="200")
    proc = subprocess.Popen([EXE, "approve", str(artifact), "--key", str(keys["reviewer"][0]),
                             "--release-key", str(keys["release"][1])],
                            stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    os.write(leader, f"{answer}\n".encode())
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.wait(timeout=120) == (0 if signed else 1), seen.decode(errors="replace")
    assert b"Approve" in seen
    assert (artifact / SIGNATURES_DIR / f"{rkid}.sig").exists() == signed


# ----- a real browser -----------------------------------------------------------------------

def _chromium(tmp_path: Path, page: Path, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
    return subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", *extra, page.as_uri()],
        capture_output=True, text=True, timeout=180)


def _png_distinct_bytes(png: bytes) -> int:
    """How many distinct byte values the image data holds (1-10 for a single colour)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(png):
        n, kind = struct.unpack(">I4s", png[pos:pos + 8])
        if kind == b"IDAT":
            idat += png[pos + 8:pos + 8 + n]
        pos += 12 + n
    return len(set(zlib.decompress(idat)))


def _check_page(dom: str) -> None:
    assert "<svg" in dom
    assert "Privacy ledger" in dom and "total" in dom
    assert "counts/class_balance" in dom or "counts/model" in dom
    assert "is not itself trusted" in dom
    assert "<script" not in dom.lower() and "<img" not in dom.lower()


def _check_png(png: bytes) -> None:
    assert len(png) > 20_000
    assert _png_distinct_bytes(png) > 64


needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(),
                                    reason="needs /usr/bin/chromium (the CI installs it)")


def rendered_dom(tmp_path: Path, page: Path, height: int) -> str:
    """The page in headless Chromium: its screenshot is not blank, its console holds no
    message; returns the DOM as Chromium built it."""
    png = tmp_path / f"{page.stem}.png"
    shot = _chromium(tmp_path, page, f"--screenshot={png}", f"--window-size=1400,{height}")
    assert shot.returncode == 0, shot.stderr[-2000:]
    _check_png(png.read_bytes())
    r = _chromium(tmp_path, page, "--enable-logging=stderr", "--v=0", "--dump-dom")
    assert r.returncode == 0, r.stderr[-2000:]
    assert [line for line in r.stderr.splitlines() if ":CONSOLE" in line] == []
    return r.stdout


@needs_chromium
def test_page_in_headless_chromium(hostile_artifact, tmp_path):
    _check_page(rendered_dom(tmp_path, write_review_html(hostile_artifact), 3000))


class _DevTools:
    """Chromium's DevTools protocol over --remote-debugging-pipe (fds 3 and 4, NUL-framed).

    Needed for the JavaScript-off check: with --blink-settings=scriptEnabled=false the
    --dump-dom and --screenshot switches produce nothing (they run script to do their
    job), whereas DOM.getOuterHTML and Page.captureScreenshot do not.
    """

    def __init__(self, profile: Path, *flags: str) -> None:
        self.proc = subprocess.Popen(
            ["bash", "-c", 'exec "$@" 3<&0 4>&1 0</dev/null 1>/dev/null', "_", str(CHROMIUM),
             "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--remote-debugging-pipe", *flags],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buf = b""
        self.events: list[dict] = []
        self.last_id = 0

    def _read(self, deadline: float) -> dict:
        assert self.proc.stdout is not None
        while b"\0" not in self.buf:
            ready, _, _ = select.select([self.proc.stdout], [], [],
                                        max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise EOFError("chromium closed the pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        assert self.proc.stdin is not None
        self.last_id += 1
        msg = {"id": self.last_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self.proc.stdin.write(json.dumps(msg).encode() + b"\0")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 60
        while True:
            got = self._read(deadline)
            if got.get("id") == self.last_id:
                assert "error" not in got, got
                return got["result"]
            self.events.append(got)

    def open(self, session: str, url: str) -> tuple[str, bytes]:
        """Load ``url``; return its DOM and a screenshot."""
        self.events.clear()
        self.call("Page.navigate", session, url=url)
        deadline = time.monotonic() + 60
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._read(deadline))
        root = self.call("DOM.getDocument", session)["root"]["nodeId"]
        dom = self.call("DOM.getOuterHTML", session, nodeId=root)["outerHTML"]
        png = base64.b64decode(self.call("Page.captureScreenshot", session, format="png")["data"])
        return dom, png

    def problems(self) -> list[dict]:
        """Console output, uncaught exceptions and browser-logged errors (e.g. CSP)."""
        return [e for e in self.events
                if e.get("method") in ("Runtime.consoleAPICalled", "Runtime.exceptionThrown")
                or (e.get("method") == "Log.entryAdded"
                    and e["params"]["entry"]["level"] in ("error", "warning"))]

    def close(self) -> None:
        try:
            self.call("Browser.close")
        finally:
            self.proc.wait(timeout=30)


@needs_chromium
def test_page_renders_with_javascript_disabled(hostile_artifact, tmp_path):
    page = write_review_html(hostile_artifact)
    control = tmp_path / "control.html"
    control.write_text("<html><body><p>x</p><script>document.body.setAttribute('data-js', "
                       "'ran')</script></body></html>")
    tools = _DevTools(tmp_path / "profile", "--blink-settings=scriptEnabled=false")
    try:
        target = tools.call("Target.createTarget", url="about:blank")["targetId"]
        session = tools.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            tools.call(f"{domain}.enable", session)
        tools.call("Emulation.setDeviceMetricsOverride", session, width=1400, height=3000,
                   deviceScaleFactor=1, mobile=False)
        control_dom, _ = tools.open(session, control.as_uri())
        assert 'data-js="ran"' not in control_dom  # JavaScript really is off
        dom, png = tools.open(session, page.as_uri())
        assert tools.problems() == []
    finally:
        tools.close()
    _check_page(dom)
    _check_png(png)
    (tmp_path / "review-nojs.png").write_bytes(png)
