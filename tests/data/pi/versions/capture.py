"""Capture tests/data/pi/versions/<version> from another Pi version driven by the mock model.

    npm install --prefix /tmp/pi-0.31.1 @mariozechner/pi-coding-agent@0.31.1
    .ci/isolated .venv/bin/python tests/data/pi/versions/capture.py 0.31.1 \
        /tmp/pi-0.31.1/node_modules/.bin/pi [old-flags]

The adapter's run (`PiHarness.run`) with the shared policy of `tests/data/capture_versions.py`;
its models.json gets the model fields older versions require (`name`, `input`), which newer ones
default. With `old-flags` (Pi 0.13), the command line is the one of Pi before extensions, skills
and session folders: no `--no-*` switches, `--session FILE` for `--session-dir`, and the model as
`--provider P --model M`.
"""

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from capture_versions import capture  # noqa: E402

from harnesses.pi.adapter import PiHarness  # noqa: E402
from rig.schema import AgentRun  # noqa: E402

SWITCHES_LATER = ("--no-extensions", "--no-skills", "--no-prompt-templates", "--no-themes")


class OldPi(PiHarness):
    """The adapter with a models.json older Pi versions accept: each model has a name and inputs."""

    def _write_models(self, agent_dir: Path, base_url: str | None) -> None:
        super()._write_models(agent_dir, base_url)
        path = agent_dir / "models.json"
        config = json.loads(path.read_text())
        for provider in config["providers"].values():
            for model in provider["models"]:
                model.setdefault("name", model["id"])
                model.setdefault("input", ["text"])
        path.write_text(json.dumps(config, indent=2) + "\n")


class OldFlagsPi(OldPi):
    """The adapter's command line in the flags of Pi 0.13, which writes `--session` only into an
    existing folder."""

    def run(self, workdir: Path, prompt: str, *args: Any, **kwargs: Any) -> AgentRun:
        (kwargs.get("run_dir") or args[1]).joinpath("session").mkdir(parents=True, exist_ok=True)
        return super().run(workdir, prompt, *args, **kwargs)

    def command(self, prompt: str, *args: Any, **kwargs: Any) -> list[str]:
        new = super().command(prompt, *args, **kwargs)
        old: list[str] = []
        parts = iter(new)
        for part in parts:
            if part == "--session-dir":
                old += ["--session", str(Path(next(parts)) / "session.jsonl")]
            elif part == "--model":
                provider, model = next(parts).split("/", 1)
                old += ["--provider", provider, "--model", model]
            elif part not in SWITCHES_LATER:
                old.append(part)
        return old


if __name__ == "__main__":
    adapter = OldFlagsPi if sys.argv[3:] == ["old-flags"] else OldPi
    capture(adapter, sys.argv[1], Path(sys.argv[2]), ("session.jsonl",), Path(__file__).parent)
