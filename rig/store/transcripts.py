"""A stored attempt's saved files as its harness's adapter reads them: the agent run, the transcript.

Both work from a results folder alone (copied to another machine, no tasks or provider): what
`rig view` shows, `rig export` writes and `rig reclassify` re-parses.
"""

import stat
from pathlib import Path
from typing import Any

from harnesses.registry import HarnessUnavailable, read_transcript
from rig.schema import AgentRun, Transcript

# What adapters save their session as (OpenCode exports one JSON document, the others append JSONL).
SESSION_NAMES = ("session.jsonl", "session.json")


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _real_directory(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def saved_run(record: dict[str, Any], folder: Path) -> AgentRun:
    """The agent run of `record` with its files in the attempt folder `folder`."""
    session = next((folder / n for n in SESSION_NAMES if _regular(folder / n)), None)
    return AgentRun(
        **record["agent"],
        session_path=session,
        stdout_path=folder / "stdout.log",
        stderr_path=folder / "stderr.log",
    )


def attempt_transcript(record: dict[str, Any], folder: Path) -> Transcript:
    """The transcript of the attempt `record` (its files in `folder`); a harness this rig has no
    adapter for, a folder that is or holds a symlink, or a file its adapter cannot read, gives an
    empty transcript naming the gap."""
    if not _real_directory(folder):
        return Transcript(harness=record["harness"], gaps=[f"{folder.name} is not a directory; not read"])
    links = sorted(entry.name for entry in folder.iterdir() if entry.is_symlink())
    if links:
        # Adapters open their files by name: a link would take them out of the results folder.
        gap = f"symlinks in the attempt folder, not read: {', '.join(links)}"
        return Transcript(harness=record["harness"], gaps=[gap])
    try:
        return read_transcript(record["harness"], saved_run(record, folder))
    except HarnessUnavailable as exc:
        return Transcript(harness=record["harness"], gaps=[str(exc)])
    except (OSError, ValueError) as exc:
        return Transcript(harness=record["harness"], gaps=[f"cannot read the saved session: {exc}"])
