"""`rig view` in a real browser: Debian's chromium, headless, driven by Playwright (never a browser of
its own). The site of a copy of tests/data/results_small, with a quarantined attempt of the real Pi
CLI's captured session and an attempt whose session and record carry HTML meant to run, is opened
from disk: the run table's filters are clicked, attempt pages opened, receipt links followed, the
whole results folder moved elsewhere and opened again, and served by `rig view --serve`.
Screenshots go to build/test-artifacts/view/.
"""

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from rig.analysis import PoolingError
from rig.report.links import attempt_page
from rig.report.report import build_report
from rig.schema import SandboxStatus
from rig.store.migrate import read_quarantine, read_runs
from rig.store.results import ResultsStore
from rig.store.transcripts import attempt_transcript
from rig.view.site import TOOL_CHARS, TRANSCRIPT_CHARS, build_view
from tests.processes import background_job, interrupt

REPO = Path(__file__).resolve().parents[1]
RIG = str(Path(sys.executable).with_name("rig"))
SMALL = REPO / "tests" / "data" / "results_small" / "results_small"
SMALL_CONFIG = REPO / "tests" / "data" / "results_small.toml"
PI_SESSION = REPO / "tests" / "data" / "pi" / "success"
ARTIFACTS = REPO / "build" / "test-artifacts" / "view"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

# Markup an agent could write, in its text, a tool call's arguments and output and in the record.
PAYLOAD = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"
HOSTILE_RUN = "t2_add_endpoint__no_agents_md__r01"
PI_RUN = "t1_fix_pagination__agents_md__r04"
LONG_RUN = "t3_fix_check__no_agents_md__r01"
# Runs of a task given a scope: one changed a file outside it, one stayed inside.
OUT_OF_SCOPE_RUN = "t4_split_constant__agents_md__r01"
IN_SCOPE_RUN = "t4_split_constant__agents_md__r02"
# The one run whose agent ran without the sandbox (every other scored run was sealed).
UNSEALED_RUN = "t5_migration__agents_md__r01"
LONG_TURNS = 400


def _add_hostile_attempt(folder: Path) -> None:
    attempt = folder / "runs" / HOSTILE_RUN / "attempt-1"
    turn = {
        "type": "message",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "text", "text": f"Done. {PAYLOAD} </div></pre>"},
                {"type": "toolCall", "id": "call_evil", "name": "bash", "arguments": {"command": PAYLOAD}},
            ],
            "usage": {"input": 10, "output": 5, "totalTokens": 15, "cost": {"total": 0.0001}},
            "stopReason": "toolUse",
        },
    }
    result = {
        "type": "message",
        "message": {
            "role": "toolResult",
            "toolCallId": "call_evil",
            "toolName": "bash",
            "content": [{"type": "text", "text": "</pre>" + PAYLOAD + "x" * (3 * TOOL_CHARS)}],
        },
    }
    with (attempt / "session.jsonl").open("a") as f:
        f.write(json.dumps(turn) + "\n" + json.dumps(result) + "\n")
    lines = (folder / "runs.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        record = json.loads(line)
        if record["run_id"] == HOSTILE_RUN:
            record["hidden"]["failed"].append(f"test_x::{PAYLOAD}")
            record["metrics"]["bash_commands"].append(PAYLOAD)
        elif record["run_id"] in (OUT_OF_SCOPE_RUN, IN_SCOPE_RUN):
            record["out_of_scope"] = ["README.md"] if record["run_id"] == OUT_OF_SCOPE_RUN else []
        lines[i] = json.dumps(record)
    (folder / "runs.jsonl").write_text("\n".join(lines) + "\n")


def _add_sandbox_verdicts(folder: Path) -> None:
    """Every scored run sealed but UNSEALED_RUN, whose agent ran with `--sandbox off`."""
    sealed = SandboxStatus(
        mode="auto", active=True, backend="bwrap", detail="bubblewrap", processes="bwrap-pidns"
    )
    unsealed = SandboxStatus(
        mode="off", active=False, detail="disabled with --sandbox off", processes="cgroup"
    )
    lines = []
    for line in (folder / "runs.jsonl").read_text().splitlines():
        record = json.loads(line)
        record["sandbox"] = (unsealed if record["run_id"] == UNSEALED_RUN else sealed).model_dump(mode="json")
        lines.append(json.dumps(record))
    (folder / "runs.jsonl").write_text("\n".join(lines) + "\n")


def _add_long_session(folder: Path) -> None:
    """Turns enough to pass what one page holds of a transcript."""
    session = folder / "runs" / LONG_RUN / "attempt-1" / "session.jsonl"
    with session.open("a") as f:
        for i in range(LONG_TURNS):
            call = {
                "type": "toolCall",
                "id": f"long_{i}",
                "name": "bash",
                "arguments": {"command": "cat big"},
            }
            f.write(
                json.dumps({"type": "message", "message": {"role": "assistant", "content": [call]}}) + "\n"
            )
            output = {
                "role": "toolResult",
                "toolCallId": f"long_{i}",
                "content": [{"type": "text", "text": "y" * 20_000}],
            }
            f.write(json.dumps({"type": "message", "message": output}) + "\n")


def _add_quarantined_pi_attempt(folder: Path) -> None:
    attempt = folder / "runs" / PI_RUN / "attempt-1"
    attempt.mkdir(parents=True)
    for name in ("session.jsonl", "stdout.log", "stderr.log"):
        shutil.copy(PI_SESSION / name, attempt / name)
    record = json.loads((folder / "runs.jsonl").read_text().splitlines()[1])
    record.update(
        run_id=PI_RUN,
        repetition=4,
        harness="pi",
        success=False,
        failing_stage=None,
        artifacts=f"runs/{PI_RUN}/attempt-1",
        infra={"is_infra": True, "rule": "provider_error", "detail": "the provider answered 529"},
    )
    (attempt / "record.json").write_text(json.dumps(record))
    (folder / "quarantine.jsonl").write_text(json.dumps(record) + "\n")


def _rig(results: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RIG_RESULTS_ROOT": str(results)}
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The results root holding results_small, its extra attempts and its view."""
    root = tmp_path_factory.mktemp("view") / "results"
    folder = root / "results_small"
    shutil.copytree(SMALL, folder)
    _add_hostile_attempt(folder)
    _add_quarantined_pi_attempt(folder)
    _add_long_session(folder)
    _add_sandbox_verdicts(folder)
    done: list[tuple[int, int]] = []
    assert build_view([folder], progress=lambda *p: done.append(p)) == folder / "view"
    assert done[-1] == (31, 31)
    return root


@pytest.fixture(scope="module")
def records(results: Path) -> list[dict]:
    """Every attempt of the view, as the rig reads it: scored ones, then quarantined ones."""
    store = ResultsStore(results / "results_small")
    return [*read_runs(store), *[{**r, "quarantined": True} for r in read_quarantine(store)]]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1300, "height": 1400})
    opened = context.new_page()
    # Any request but to a file of the site would be a resource the page may not load.
    requests: list[str] = []
    opened.on("request", lambda r: requests.append(r.url))
    yield opened
    assert all(url.startswith("file://") for url in requests), requests
    context.close()


def _shot(page: Page, name: str, at: str | None = None) -> None:
    """A screenshot of the window, scrolled to `at` (a whole long page is more than chromium's
    headless compositor can always capture)."""
    if at:
        page.locator(at).scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def _visible_rows(page: Page) -> int:
    return page.locator("#runs tbody tr:visible").count()


def _outcome(record: dict) -> str:
    return "quarantined" if record.get("quarantined") else "success" if record["success"] else "failure"


def test_filters_show_the_right_rows(results: Path, records: list[dict], page: Page) -> None:
    view = results / "results_small" / "view"
    page.goto((view / "runs.html").as_uri())
    assert _visible_rows(page) == len(records) == 31
    failures = [r for r in records if _outcome(r) == "failure"]
    page.select_option("#filter-outcome", "failure")
    assert _visible_rows(page) == len(failures)
    assert page.locator("#shown").inner_text() == str(len(failures))
    assert "outcome = failure" in page.locator("#active").inner_text()
    assert urlparse(page.url).fragment == "outcome=failure"
    t1 = [r for r in failures if r["task"] == "t1_fix_pagination"]
    page.select_option("#filter-task", "t1_fix_pagination")
    assert _visible_rows(page) == len(t1) == 5
    # The stage options count the rows they would show with the task and outcome filters kept.
    pytest_label = page.locator("#filter-stage option[value='pytest']").inner_text()
    assert pytest_label == f"pytest ({sum(r['failing_stage'] == 'pytest' for r in t1)})"
    _shot(page, "runs-filtered")

    page.click("#reset")
    assert _visible_rows(page) == len(records)
    read_agents_md = [r for r in records if "AGENTS.md" in r["metrics"]["docs_read"]]
    page.select_option("#filter-behaviour", "read_agents_md")
    assert _visible_rows(page) == len(read_agents_md) > 0
    page.select_option("#filter-condition", "no_agents_md")
    assert _visible_rows(page) == sum(r["condition"] == "no_agents_md" for r in read_agents_md)

    # The filter state is in the address: a link to it opens the table filtered.
    page.goto((view / "runs.html").as_uri() + "#outcome=quarantined")
    assert _visible_rows(page) == 1
    assert page.locator("#filter-outcome").input_value() == "quarantined"
    assert page.locator("#runs tbody tr:visible .badge").inner_text() == "quarantined"


def test_an_attempt_page_shows_the_transcript_and_links_its_receipts(
    results: Path, records: list[dict], page: Page
) -> None:
    folder = results / "results_small"
    page.goto((folder / "view" / "runs.html").as_uri() + "#outcome=quarantined")
    page.click(f"#runs tbody tr:visible a:text('{PI_RUN}')")
    page.wait_for_url("**/attempt-1.html")
    assert page.url.endswith(attempt_page("results_small", PI_RUN, 1))
    assert page.locator("#outcome").inner_text() == "quarantined"
    assert "provider_error" in page.locator(".quarantined-note").inner_text()

    record = next(r for r in records if r["run_id"] == PI_RUN)
    transcript = attempt_transcript(record, folder / record["artifacts"])
    turns = [s for s in transcript.steps if s.source == "agent"]
    assert len(turns) >= 5 and not transcript.gaps
    assert page.locator(".step.agent").count() == len(turns)
    names = [call.name for step in turns for call in step.tool_calls]
    assert page.locator(".tool-name").all_inner_texts() == names
    assert page.locator(".call .args").count() == len(names)
    assert page.locator(".step.user").first.inner_text().count("has_next") >= 1
    # Tokens per turn, as the session recorded them.
    first = turns[0]
    if first.output_tokens:
        assert f"out {first.output_tokens:,}" in page.locator(".step.agent .tokens").first.inner_text()
    _shot(page, "attempt-pi", "#transcript")

    receipts = page.locator("#receipts a")
    assert set(receipts.all_inner_texts()) == {"record.json", "session.jsonl", "stdout.log", "stderr.log"}
    for link in receipts.all():
        target = Path(unquote(urlparse(link.evaluate("a => a.href")).path))
        assert target.is_file() and target.parent == folder / record["artifacts"]
    page.click("#receipts a:text('stdout.log')")
    assert page.url.endswith(f"runs/{PI_RUN}/attempt-1/stdout.log")


def test_scored_attempts_show_verdicts_and_diff(results: Path, records: list[dict], page: Page) -> None:
    folder = results / "results_small"
    failed = next(r for r in records if r["failing_stage"] == "pytest" and r["run_id"] != HOSTILE_RUN)
    page.goto((folder / "view" / attempt_page("results_small", failed["run_id"], 1)).as_uri())
    assert page.locator("#outcome").inner_text() == "failure"
    verdicts = page.locator("#verdicts").inner_text()
    assert failed["hidden"]["failed"] and all(t in verdicts for t in failed["hidden"]["failed"])
    assert "failed stages: pytest" in verdicts and "None changed." in verdicts
    page.click("#next")
    assert page.locator("h1 code").inner_text() != failed["run_id"]

    solved = next(r for r in records if r["success"] and r["task"] == "t4_split_constant")
    page.goto((folder / "view" / attempt_page("results_small", solved["run_id"], 1)).as_uri())
    assert page.locator("#outcome").inner_text() == "success"
    diff = (folder / solved["artifacts"] / "diff.patch").read_text().splitlines()
    added = [line for line in diff if line.startswith("+") and not line.startswith("+++")]
    assert page.locator("#diff .add").count() == len(added) > 0
    _shot(page, "attempt-success", "#diff")


def test_changes_outside_the_scope_are_a_filter_and_listed(results: Path, page: Page) -> None:
    view = results / "results_small" / "view"
    page.goto((view / "runs.html").as_uri())
    page.select_option("#filter-behaviour", "out_of_scope")
    assert _visible_rows(page) == 1
    assert page.locator("#runs tbody tr:visible").inner_text().count(OUT_OF_SCOPE_RUN) == 1
    page.goto((view / attempt_page("results_small", OUT_OF_SCOPE_RUN, 1)).as_uri())
    verdicts = page.locator("#verdicts").inner_text()
    assert "Changed outside the task's scope:" in verdicts and "README.md" in verdicts
    page.goto((view / attempt_page("results_small", IN_SCOPE_RUN, 1)).as_uri())
    assert "Every change is inside the task's scope." in page.locator("#verdicts").inner_text()
    page.goto((view / attempt_page("results_small", HOSTILE_RUN, 1)).as_uri())
    assert "The task has no scope." in page.locator("#verdicts").inner_text()


def test_agent_markup_is_shown_never_run(results: Path, page: Page) -> None:
    view = results / "results_small" / "view"
    page.goto((view / attempt_page("results_small", HOSTILE_RUN, 1)).as_uri())
    assert page.title() != "pwned"
    assert page.evaluate("document.querySelectorAll('script, img').length") == 0
    transcript = page.locator("#transcript").inner_text()
    assert transcript.count("<script>document.title='pwned'</script>") >= 3  # text, arguments, output
    assert PAYLOAD in page.locator("#verdicts").inner_text()
    assert PAYLOAD in page.locator("#commands").inner_text()
    # The long output is cut, with a note that points to the whole session.
    assert len(page.locator(".call .out").last.inner_text()) == TOOL_CHARS
    note = page.locator(".call .note").last
    assert (
        f"{len(PAYLOAD) + 6 + 3 * TOOL_CHARS - TOOL_CHARS:,} more characters not shown" in note.inner_text()
    )
    session = Path(unquote(urlparse(note.locator("a").evaluate("a => a.href")).path))
    assert session == results / "results_small" / "runs" / HOSTILE_RUN / "attempt-1" / "session.jsonl"
    _shot(page, "attempt-hostile", ".step.agent >> nth=-1")
    # The run table and the overview carry the same strings as text.
    page.goto((view / "runs.html").as_uri())
    assert page.title() != "pwned" and page.evaluate("document.querySelectorAll('script').length") == 1
    page.goto((view / "index.html").as_uri())
    assert page.title() != "pwned"
    _shot(page, "index")


def test_a_run_that_was_not_sealed_is_marked_everywhere(results: Path, page: Page) -> None:
    """The overview counts it and says it in the report, the table filters it, its page says why."""
    view = results / "results_small" / "view"
    page.goto((view / "index.html").as_uri())
    assert page.locator("a.badge.unsealed").inner_text() == "1 not sealed"
    assert "1 of 30 scored runs was not sealed" in page.locator("section.report").inner_text()
    page.click("a.badge.unsealed")
    assert _visible_rows(page) == 1
    row = page.locator("#runs tbody tr:visible")
    assert UNSEALED_RUN in row.inner_text() and "not sealed" in row.locator(".chip").all_inner_texts()
    row.locator("a").first.click()
    page.wait_for_url("**/attempt-1.html")
    assert page.locator("#unsealed").inner_text() == "not sealed"
    note = page.locator(".unsealed-note").inner_text()
    assert (
        "mode off: disabled with --sandbox off" in note
        and "could read the hidden tests and the answers" in note
    )
    _shot(page, "attempt-unsealed")
    # A sealed run's page has no such mark.
    page.goto((view / attempt_page("results_small", IN_SCOPE_RUN, 1)).as_uri())
    assert page.locator("#unsealed").count() == 0 and page.locator(".unsealed-note").count() == 0


def test_a_page_holds_a_bounded_share_of_a_long_transcript(results: Path, page: Page) -> None:
    path = results / "results_small" / "view" / attempt_page("results_small", LONG_RUN, 1)
    assert path.stat().st_size < TRANSCRIPT_CHARS + 500_000
    page.goto(path.as_uri())
    shown = page.locator(".step.agent").count()
    assert 0 < shown < LONG_TURNS
    note = page.locator("#transcript > p.note").inner_text()
    assert note.startswith(f"{LONG_TURNS + 2 - shown} more steps not shown")  # the run's own 2 turns


def test_the_view_works_from_a_copy_elsewhere(results: Path, records: list[dict], page: Page) -> None:
    moved = results.parent / "elsewhere" / "copied-results"
    shutil.copytree(results, moved)
    view = moved / "results_small" / "view"
    for html in view.rglob("*.html"):
        assert str(results) not in html.read_text(), f"{html} names the folder it was written in"
    page.goto((view / "index.html").as_uri())
    page.click("a.badge.failure")
    assert _visible_rows(page) == sum(_outcome(r) == "failure" for r in records)
    page.locator("#runs tbody tr:visible a").first.click()
    page.wait_for_url("**/attempt-*.html")
    link = page.locator("#receipts a:text('diff.patch')")
    target = Path(unquote(urlparse(link.evaluate("a => a.href")).path))
    assert target.is_file() and target.is_relative_to(moved)


def test_report_links_to_the_view(results: Path) -> None:
    out = results.parent / "report"
    build_report([results / "results_small"], out, fmt="html")
    view = results / "results_small" / "view"
    html = (out / "report.html").read_text()
    assert f'href="{os.path.relpath(view / "runs.html", out)}#outcome=failure"' in html
    failures = (out / "failures.md").read_text()
    page = attempt_page("results_small", "t1_fix_pagination__agents_md__r01", 1)
    assert f"[view]({os.path.relpath(view / page, out)})" in failures


def test_serve_answers_on_loopback_and_stops_on_ctrl_c(results: Path) -> None:
    env = {**os.environ, "RIG_RESULTS_ROOT": str(results)}
    # Started as a background job is (SIGINT ignored): the server installs its own Ctrl-C.
    proc = subprocess.Popen(
        [RIG, "view", str(SMALL_CONFIG), "--serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=background_job,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert lines[0].strip() == str(results / "results_small" / "view" / "index.html")
        serving = lines[1].split(" at ")
        assert lines[1].startswith("serving ") and len(serving) == 2, (lines, proc.stderr)
        url = serving[1].split(" ")[0]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/view/index.html")
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.status == 200 and "rig view: results_small" in answer.read().decode()
        receipt = url.replace("view/index.html", f"runs/{PI_RUN}/attempt-1/stdout.log")
        with urllib.request.urlopen(receipt, timeout=10) as answer:
            assert answer.read() == (PI_SESSION / "stdout.log").read_bytes()
        # A link in the results folder to a file outside it is not served.
        outside = results.parent / "outside.txt"
        outside.write_text("not for the browser")
        (results / "results_small" / "outside-link").symlink_to(outside)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url.replace("view/index.html", "outside-link"), timeout=10)
        assert refused.value.code == 404
    finally:
        out, err = interrupt(proc)
    assert proc.returncode == 0, err
    assert out.strip().endswith("stopped")


def test_bad_input_is_one_line_and_writes_nothing(results: Path, tmp_path: Path) -> None:
    not_a_view = tmp_path / "mine"
    not_a_view.mkdir()
    (not_a_view / "notes.txt").write_text("keep me")
    proc = _rig(results, "view", str(SMALL_CONFIG), "--out", str(not_a_view))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "is not a rig view" in proc.stderr
    assert [p.name for p in not_a_view.iterdir()] == ["notes.txt"]

    # Records that measured different things cannot be pooled in the overview: nothing is written.
    mixed = tmp_path / "results" / "results_small"
    shutil.copytree(SMALL, mixed)
    lines = (mixed / "runs.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["pins"]["fixture_hash"] = "0" * 64
    (mixed / "runs.jsonl").write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    before = sorted(p.name for p in mixed.iterdir())
    with pytest.raises(PoolingError, match="--allow-mixed-pins"):
        build_view([mixed])
    assert sorted(p.name for p in mixed.iterdir()) == before


def test_only_quarantined_attempts_get_a_view_without_the_report(results: Path, tmp_path: Path) -> None:
    folder = tmp_path / "results_small"
    folder.mkdir()
    shutil.copy(SMALL / "experiment.json", folder / "experiment.json")
    (folder / "runs.jsonl").write_text("")
    shutil.copy(results / "results_small" / "quarantine.jsonl", folder / "quarantine.jsonl")
    shutil.copytree(results / "results_small" / "runs" / PI_RUN, folder / "runs" / PI_RUN)
    view = build_view([folder])
    assert "every attempt so far was quarantined" in (view / "index.html").read_text()
    assert (view / attempt_page("results_small", PI_RUN, 1)).is_file()
    assert not (view / "report.html").exists()
