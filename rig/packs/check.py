"""What `rig pack new` runs before it says done: the environment's build, then the gate on a clean
copy of the fixture in it; tests that fail there whatever the code are set aside as known failures."""

import os
import shlex
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rig.confine.project_env import ProjectEnv
from rig.packs.manifest import MANIFEST, load_pack
from rig.packs.new import toml_value
from rig.runners.registry import kind_of
from rig.schema import CheckOutcome, GateSpec, KnownFailure, Pack
from rig.verify.checks import GATE_STAGE, gate_command, gate_output, run_check
from rig.workspace.build import copy_fixture

# Known failures are set aside only while they are few: a gate most of whose tests fail does not
# run in rig's environment, which a list of failures would hide.
KNOWN_FAILURES_MAX_SHARE = 0.5


@dataclass(frozen=True)
class EnvironmentCheck:
    """What `rig pack new` ran before saying done: the environment's build, then the gate on a
    clean copy of the fixture in it."""

    lines: list[str]
    ok: bool


def _on_clean_copy(pack: Pack, gate: GateSpec, env: ProjectEnv) -> CheckOutcome:
    """`gate` run on a fresh copy of `pack`'s fixture, in `env`."""
    with tempfile.TemporaryDirectory(prefix="rig-pack-new-") as tmp:
        work = copy_fixture(pack.fixture_dir, Path(tmp) / "work")
        return run_check(work, Path(tmp) / "home", gate, project_env=env)


def _known_failures_lines(run: list[str], failures: list[KnownFailure]) -> list[str]:
    """[gate]'s `run` and `known_failures` as pack.toml holds them."""
    return [
        f"run = {toml_value(run)}",
        "# Measured by `rig pack new`: tests that fail on the clean fixture in rig's environment",
        "# whatever the code, deselected from `run` above; each with its first error line.",
        "known_failures = [",
        *(f"    {toml_value({'test': f.test, 'error': f.error})}," for f in failures),
        "]",
    ]


def _set_aside(pack: Pack, env: ProjectEnv) -> EnvironmentCheck | str | None:
    """When the pack's gate runs its runner kind's own tests and a few of them fail on the clean
    fixture: list them in pack.toml as known failures, deselected from the gate, and run the gate
    again (its check). A line saying why they were not set aside (too many fail, a file does not
    load); None when the gate cannot name its failures."""
    gate, kind = pack.spec.gate, kind_of(pack.spec.runner.kind)
    spotter = kind.gate_failures
    if spotter is None or gate.known_failures or not kind.runs_tests(gate_command(gate, env)):
        return None
    listing = gate.model_copy(update={"run": [*gate.run, *spotter.report]})
    with tempfile.TemporaryDirectory(prefix="rig-pack-new-") as tmp:
        work = copy_fixture(pack.fixture_dir, Path(tmp) / "work")
        output = gate_output(work, Path(tmp) / "home", listing, env)
    if output is None:
        return None
    found = spotter.read(output)
    if found.unloaded:
        unloaded = f"{len(found.unloaded)} test files do not load ({found.unloaded[0]})"
        return f"known failures: not set aside, {unloaded}"
    share = len(found.failed) / max(1, len(found.failed) + found.passed)
    if not found.failed or share > KNOWN_FAILURES_MAX_SHARE:
        return (
            f"known failures: not set aside, {len(found.failed)} of {len(found.failed) + found.passed} "
            "tests fail: the gate does not run in this environment"
        )
    failures = [KnownFailure(test=test, error=error[:200]) for test, error in found.failed]
    run = [*gate.run, *(arg for failure in failures for arg in spotter.deselect(failure.test))]
    manifest = pack.root / MANIFEST
    text = manifest.read_text(encoding="utf-8")
    old = f"run = {toml_value(gate.run)}\n"
    if text.count(old) != 1:
        return None
    # Written beside and renamed over: pack.toml is never half-written.
    partial = manifest.with_name(f".{MANIFEST}.partial")
    partial.write_text(
        text.replace(old, "\n".join(_known_failures_lines(run, failures)) + "\n"), encoding="utf-8"
    )
    os.replace(partial, manifest)
    gate = load_pack(pack.root).spec.gate
    first = failures[0]
    said = (
        f"gate on the clean fixture: {len(failures)} of {len(failures) + found.passed} tests fail "
        f"whatever the code (first: {first.test}: {first.error}); deselected, listed in pack.toml "
        "[gate] known_failures"
    )
    if _on_clean_copy(pack, gate, env).ok:
        return EnvironmentCheck(
            [said, f"gate on the clean fixture, in the environment: passes ({' '.join(gate.run)})"], True
        )
    return said


def check_environment(path: Path, shown: str) -> EnvironmentCheck:
    """Build the written pack's environment (cached after the first time) and run its gate on a
    clean copy of the fixture in it; what it ran, and the key to change when it fails."""
    from rig.env.activate import activate, written_into
    from rig.env.uvtool import EnvError

    pack = load_pack(path)
    again = f"then `rig env build {shlex.quote(shown)}`"
    try:
        env = activate(pack)
    except EnvError as exc:
        return EnvironmentCheck(
            [f"environment: NOT BUILT: {exc}", f"Change [environment] in pack.toml, {again}."], False
        )
    assert env is not None
    lines = [f"environment: built {env.hash[:12]} at {env.root} (rig env show {shlex.quote(shown)} lists it)"]
    started = time.time()
    outcome = _on_clean_copy(pack, pack.spec.gate, env)
    shown_gate = " ".join(pack.spec.gate.run)
    files = written_into(env, started)
    if files is not None:
        return EnvironmentCheck(
            [
                *lines,
                f"gate on the clean fixture, in the environment: WROTE INTO THE ENVIRONMENT "
                f"({', '.join(files) or 'a file'}), which runs show read-only, so it fails there",
                f"Change [gate] run in pack.toml (drop the option that writes it), {again}.",
            ],
            False,
        )
    if outcome.ok:
        return EnvironmentCheck(
            [*lines, f"gate on the clean fixture, in the environment: passes ({shown_gate})"], True
        )
    if outcome.failed == [GATE_STAGE]:
        known = _set_aside(pack, env)
        if isinstance(known, EnvironmentCheck):
            return EnvironmentCheck([*lines, *known.lines], known.ok)
        lines += [known] if known else []
    said = (
        outcome.error or "; ".join(f"{k}: {' '.join(v)}" for k, v in outcome.results.items()) or "no output"
    )
    key = "[environment] build" if outcome.failed == ["build"] else "[gate] run or [environment]"
    return EnvironmentCheck(
        [
            *lines,
            f"gate on the clean fixture, in the environment: FAILS at {', '.join(outcome.failed)} "
            f"(exit {outcome.exit_code}): {said}",
            f"Change {key} in pack.toml, {again}; the build log is beside the environment.",
        ],
        False,
    )
