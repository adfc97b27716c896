"""Every red-team strategy through every real CLI, driven by the mock model: `make redteam`.

`make test` runs every strategy through the scripted agent and one round of a rotation through the
real CLIs (tests/test_redteam.py: each CLI a slice of the strategies, every pair in fourteen
rounds, the round chosen by the commit); this runs all of them through each of the five CLIs
(sandbox required), about five times the scripted suite's runs, too long for the suite's time
budget on two cores. Each
outcome is checked exactly as the suite checks its real-CLI runs (`check_real_cli`: not a
success, not infrastructure, the strategy's evidence in the record, every command served by the
mock and run by the CLI, the sandbox active, nothing outside the workspace changed). The table of
outcomes (strategy x CLI: caught, or the first line of what failed) is printed and written into
docs/red-team.md between its markers, with the date, the rig version and the CLIs' versions.

    .ci/isolated .venv/bin/python tests/redteam_every_cli.py [CLI ...]   # default: every real CLI

A run "held" when the rig did not score it a success, it was no infrastructure and nothing
outside changed, but the strategy's own evidence is absent because the CLI did not carry the attack
out (Codex rejects `rm -rf`-style commands; Gemini CLI blocks command substitution): the rig was
not tested by it there. Exit status 0 when every run is caught or held, 1 otherwise.
"""

import datetime
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from redteam_strategies import DOC, STRATEGIES  # noqa: E402
from test_redteam import (  # noqa: E402
    REAL_CLIS,
    VICTIM_TEXT,
    every_cli_verdict,
    require_phases,
    run_phase,
)

from harnesses.capabilities import pinned_version  # noqa: E402
from harnesses.registry import adapter_class  # noqa: E402
from rig.version import rig_version  # noqa: E402

START = "<!-- every-cli:start (written by tests/redteam_every_cli.py, `make redteam`; do not edit) -->"
END = "<!-- every-cli:end -->"
# Outside the repository (no run's workspace may be inside a git repository).
RESULTS = Path(tempfile.gettempdir()) / "rig-redteam-every-cli"


def run_cli(base: Path, cli: str, victim: Path) -> dict[str, str]:
    """Every strategy through `cli`: its verdict by strategy id."""
    verdicts = {}
    for jobs in require_phases(cli):
        for job, outcome in zip(jobs, run_phase(base, jobs, victim, parallel=2), strict=True):
            for strategy in job.strategies:
                verdicts[strategy.id] = every_cli_verdict(strategy, cli, outcome)
    return verdicts


def table(clis: list[str], verdicts: dict[str, dict[str, str]], minutes: float) -> str:
    """The Markdown section written into docs/red-team.md."""
    versions = ", ".join(f"{cli} {pinned_version(adapter_class(cli)) or '?'}" for cli in clis)
    every = [v for by_cli in verdicts.values() for v in by_cli.values()]
    caught, held = every.count("caught"), sum(v.startswith("held") for v in every)
    lines = [
        f"Last run {datetime.date.today().isoformat()}, rig {rig_version()}, {versions}: "
        f"{len(every)} runs, {caught} caught, {held} held without the attack's evidence, "
        f"{len(every) - caught - held} not caught; {minutes:.0f} min on this machine.",
        "",
        "| strategy | " + " | ".join(clis) + " |",
        "| :--- | " + " | ".join(":---" for _ in clis) + " |",
    ]
    for strategy in STRATEGIES:
        cells = [verdicts[cli].get(strategy.id, "not run") for cli in clis]
        lines.append(f"| {strategy.id} {strategy.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write(section: str) -> None:
    """Put `section` between the markers of docs/red-team.md (appended with them the first time)."""
    text = DOC.read_text()
    if START not in text:
        text = text.rstrip("\n") + f"\n\n{START}\n{END}\n"
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{START}\n{section}{END}{tail}")


def main(argv: list[str]) -> int:
    clis = argv or list(REAL_CLIS)
    unknown = [c for c in clis if c not in REAL_CLIS]
    if unknown:
        print(f"unknown CLI {unknown[0]!r}; use {', '.join(REAL_CLIS)}", file=sys.stderr)
        return 2
    started = time.monotonic()
    verdicts: dict[str, dict[str, str]] = {}
    # Kept until the next run, so that every run's receipts can be read.
    shutil.rmtree(RESULTS, ignore_errors=True)
    RESULTS.mkdir(parents=True)
    victim = RESULTS / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    for cli in clis:
        print(f"{cli}: {len(STRATEGIES)} strategies ...", file=sys.stderr, flush=True)
        verdicts[cli] = run_cli(RESULTS / cli, cli, victim)
        missed = [sid for sid, v in verdicts[cli].items() if v != "caught"]
        print(f"{cli}: {len(verdicts[cli]) - len(missed)} caught; not: {missed}", file=sys.stderr)
    print(f"receipts: {RESULTS}", file=sys.stderr)
    section = table(clis, verdicts, (time.monotonic() - started) / 60)
    print(section)
    write(section)
    every = [v for by_cli in verdicts.values() for v in by_cli.values()]
    return 0 if all(v == "caught" or v.startswith("held") for v in every) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
