"""Capture tests/data/gemini/versions/<version> from a Gemini CLI version driven by the mock model.

    npm install --prefix /tmp/gemini-0.18.4 @google/gemini-cli@0.18.4
    .ci/isolated .venv/bin/python tests/data/gemini/versions/capture.py 0.18.4 \
        /tmp/gemini-0.18.4/node_modules/.bin/gemini

The adapter's run (`GeminiHarness.run`) with the shared policy of `tests/data/capture_versions.py`;
the settings the adapter wrote are kept too (the parser reads the thinking setting there).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from capture_versions import capture  # noqa: E402

from harnesses.gemini.adapter import GeminiHarness  # noqa: E402

KEPT = ("session.jsonl", "home/.gemini/settings.json", "home/.gemini/tmp")


class OldGemini(GeminiHarness):
    """The adapter without `--skip-trust`, which versions before the folder trust prompt refuse."""

    def command(self, prompt: str) -> list[str]:
        command = super().command(prompt)
        if sys.argv[3:] == ["no-skip-trust"]:
            command.remove("--skip-trust")
        return command


if __name__ == "__main__":
    capture(OldGemini, sys.argv[1], Path(sys.argv[2]), KEPT, Path(__file__).parent)
