"""Recapture tests/data/pi from real Pi runs against the mock model (run by hand after a Pi upgrade).

    .ci/isolated .venv/bin/python tests/data/pi/capture.py [CASE ...]

Each case runs PiHarness.run for t1_fix_pagination with CI=true in the parent's environment, the
mock serving `USAGE` on every response with its own policy and faults (the base class's mock_model is
swapped for one serving them), then saves session.jsonl, stdout.log, stderr.log and the mock's
ledger, redacted (<RUNS>, <REPO>, <HOME>, <user>, <host>). The retry cases turn Pi's own retries
on (2 retries, 50 ms base delay) to record its auto_retry events; the adapter turns them off.
"""

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import harnesses.pi.adapter as pi  # noqa: E402
from harnesses import cli_harness  # noqa: E402
from harnesses.mock_model.policy import Policy, Step, patch_command  # noqa: E402
from harnesses.mock_model.server import Faults, MockModelServer, Usage, WireProtocol  # noqa: E402
from rig.packs.manifest import load_pack  # noqa: E402
from rig.packs.tasks import load_tasks  # noqa: E402
from rig.paths import REPO_ROOT  # noqa: E402
from rig.schema import Condition, Provider  # noqa: E402
from rig.store.redact import Redactor  # noqa: E402
from rig.workspace.build import apply_patch, copy_fixture  # noqa: E402

DEST = Path(__file__).resolve().parent
USAGE = Usage(input=1000, output=100, cache_read=500, cache_write=40, reasoning=20)
RETRY = {"retry": {"enabled": True, "maxRetries": 2, "baseDelayMs": 50, "provider": {"maxRetries": 0}}}
# The adapter's settings with compaction forced: any context past the mock model's window minus
# reserveTokens (128,000 - 127,000) is summarized when the agent loop ends.
COMPACT = pi.settings(30_000) | {"compaction": {"reserveTokens": 127_000, "keepRecentTokens": 100}}
TASK = load_tasks(only=["t1_fix_pagination"])[0]
MINI = Policy("mini", (Step("shell", command="echo CI=$CI"), Step("final", text="Nothing to change.")))
RICH = Policy(
    "rich",
    (
        Step("read", path="AGENTS.md"),
        Step("shell", command="grep -rn 'has_next' taskapp | head -3"),
        Step("shell", command="sed -n 40,45p taskapp/utils/pagination.py"),
        Step("shell", command="cat does-not-exist.txt"),
        Step("shell", command=patch_command(TASK.solution_patch.read_text())),
        Step("write", path="notes/pi.txt", content="has_next compares with <\n"),
        Step("shell", command="python scripts/check.py"),
        Step("shell", command="python -m pytest -q tests/unit 2>&1 | tail -1"),
        Step("final", text="Fixed: has_next now compares with <."),
    ),
)
CASES: dict[str, tuple[Policy, Faults, dict[str, Any] | None]] = {
    "success": (RICH, Faults(), None),
    "provider_error": (MINI, Faults(mode="http_error", status=500), None),
    "retry_gave_up": (MINI, Faults(mode="http_error", status=503), RETRY),
    "retry_recovered": (MINI, Faults(mode="http_error", status=500, first_n=1), RETRY),
    "cut_stream": (MINI, Faults(mode="cut_stream", first_n=1, after_events=2), None),
    "compaction": (MINI, Faults(), COMPACT),
}


def capture(case: str, root: Path, redactor: Redactor) -> None:
    policy, faults, settings = CASES[case]

    @contextmanager
    def serve(_task: object, _options: object, run_dir: Path, protocol: WireProtocol) -> Iterator[str]:
        server = MockModelServer(policy, usage=USAGE, faults=faults, protocols=[protocol]).start()
        try:
            yield server.base_url
        finally:
            server.stop()
            ledger = {"policy": policy.name, "ledger": [asdict(e) for e in server.ledger]}
            (run_dir / "mock-ledger.json").write_text(json.dumps(ledger, indent=2) + "\n")

    default_settings = pi.settings
    # The base class starts the mock for every adapter: the case's server replaces it there.
    default_mock = cli_harness.mock_model
    cli_harness.mock_model = serve  # type: ignore[assignment]
    if settings is not None:
        pi.settings = lambda _ms: settings  # type: ignore[assignment]
    try:
        work = copy_fixture(load_pack().fixture_dir, root / case / "work")
        apply_patch(work, TASK.setup_patch)
        harness = pi.PiHarness(TASK, Provider(), None, "high", 30.0)
        run = harness.run(work, TASK.spec.prompt, Condition(name=case), root / case / "run", 120)
    finally:
        pi.settings = default_settings
        cli_harness.mock_model = default_mock
    metrics = harness.parse_session(run)
    print(case, run.exit_code, run.wall_s, harness.infra_signature(run, metrics), metrics.stop_reasons)
    out = DEST / case
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    for name in ("session.jsonl", "stdout.log", "stderr.log", "mock-ledger.json"):
        if (root / case / "run" / name).exists():
            shutil.copyfile(root / case / "run" / name, out / name)
    redactor.tree(out)


def main() -> None:
    os.environ["CI"] = "true"  # must not reach Pi: the captured `echo CI=$CI` shows it did not
    root = Path(tempfile.mkdtemp(prefix="pi-capture-"))
    try:
        redactor = Redactor.for_machine(runs_root=root, repo_root=REPO_ROOT)
        for case in sys.argv[1:] or CASES:
            capture(case, root, redactor)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
