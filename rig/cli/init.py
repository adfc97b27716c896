"""`rig init PACK`: a commented experiment for a pack, ready to edit and run."""

from pathlib import Path
from typing import Annotated

import typer

from rig.cli.common import fail
from rig.cli.main import app

CONTEXT_FILE = "AGENTS.md"


@app.command()
def init(
    pack: Annotated[str, typer.Argument(help="The pack: builtin:NAME (a shipped one) or its folder.")],
    harness: Annotated[
        str, typer.Option(help="The harness CLI the experiment runs (rig harness list).")
    ] = "pi",
    out: Annotated[
        Path | None, typer.Option(help="The experiment file to write (default: ./<pack name>.toml).")
    ] = None,
) -> None:
    """Write a commented experiment for PACK: every task, two conditions (with and without the
    pack's AGENTS.md when its fixture has one), the mock model as provider so it runs offline at
    once; the file is checked as `rig run` loads it before it is written, and an existing file is
    never replaced."""
    import os
    import tempfile

    from harnesses.registry import harness_names
    from rig.experiment.load import ExperimentError, load_experiment
    from rig.packs.manifest import PackError, load_pack
    from rig.packs.tasks import TaskError, load_tasks
    from rig.paths import BUILTIN_PREFIX

    if harness not in harness_names():
        raise fail(f"unknown harness {harness!r}; use one of {', '.join(harness_names())}")
    try:
        loaded = load_pack(pack if pack.startswith(BUILTIN_PREFIX) else Path(pack).resolve())
        tasks = load_tasks(loaded)
    except (PackError, TaskError) as exc:
        raise fail(str(exc)) from exc
    target = (out or Path(f"{loaded.name}.toml")).resolve()
    if target.exists():
        raise fail(f"{target} exists; remove it or give another file with --out")
    reference = pack if pack.startswith(BUILTIN_PREFIX) else os.path.relpath(loaded.root, target.parent)
    text = template(
        loaded.name, reference, harness, [t.id for t in tasks], (loaded.fixture_dir / CONTEXT_FILE).is_file()
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Checked as `rig run` will load it, under a temporary name: a file that cannot run is never left.
    with tempfile.NamedTemporaryFile("w", dir=target.parent, suffix=".toml", delete=False) as draft:
        draft.write(text)
    staged = Path(draft.name)
    try:
        load_experiment(staged)
    except ExperimentError as exc:
        staged.unlink()
        raise fail(f"the experiment rig init wrote does not load ({exc}); please report it") from exc
    staged.rename(target)
    shown = os.path.relpath(target)
    typer.echo(f"wrote {target}; run it: rig run {shown}, then rig report {shown}")


def template(name: str, pack: str, harness: str, tasks: list[str], has_context: bool) -> str:
    """The experiment file `rig init` writes (TOML with comments)."""
    if has_context:
        arms = f"""# Condition A removes the pack's {CONTEXT_FILE} from every workspace; condition B keeps it.
[[conditions]]
name = "no_agents_md"
remove_files = ["{CONTEXT_FILE}"]
harness_options = {{ mock_policy = "solution" }}

[[conditions]]
name = "agents_md"
harness_options = {{ mock_policy = "solution" }}
"""
    else:
        arms = """# Two conditions that differ in one factor: give B what you want to measure (thinking,
# tools, skills, write_files, append_system_prompt, harness_settings ...: docs/experiments.md).
[[conditions]]
name = "a"
harness_options = { mock_policy = "solution" }

[[conditions]]
name = "b"
harness_options = { mock_policy = "solution" }
"""
    listed = ", ".join(f'"{task}"' for task in tasks)
    return f"""# An experiment on the pack {name!r}, written by `rig init`; every field: docs/experiments.md.
#   rig run THIS_FILE && rig report THIS_FILE
name = "{name}_ab"
# The harness CLI (rig harness list): pi, claude-code, codex, gemini, opencode.
harness = "{harness}"
# The pack: builtin:NAME for one shipped with rig, else its folder relative to this file.
pack = "{pack}"
# "all", or some of the pack's tasks: {listed}
tasks = "all"
repetitions = 4
seed = 1

# The mock model drives the real CLI offline: each condition's `mock_policy = "solution"` replays
# the task's reference solution (a smoke test of the whole pipeline, not a measurement). For a real
# model, replace this table with your provider, remove the harness_options, and set `model`:
#   [provider]
#   kind = "real"
#   name = "anthropic"
#   base_url = "https://api.anthropic.com"
#   api_key_env = "ANTHROPIC_API_KEY"
[provider]
kind = "mock"

{arms}"""
