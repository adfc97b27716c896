"""Where `rig view` puts its pages: shared by the viewer, which writes them, and `rig report`, whose
links point at them once a view has been written."""

import re
from pathlib import Path

# The run table; its filters are read from the fragment, e.g. `runs.html#outcome=failure`.
RUNS_PAGE = "runs.html"
INDEX_PAGE = "index.html"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def default_view_dir(folders: list[Path]) -> Path:
    """The view of one results folder is its `view/`; of A compared with B, A's `view-vs-B/`."""
    first = Path(folders[0])
    if len(folders) == 1:
        return first / "view"
    return first / ("view-vs-" + "-".join(_segment(Path(f).name) for f in folders[1:]))


def existing_view(folders: list[Path]) -> Path | None:
    """The default view of `folders` when one has been written, else None."""
    view = default_view_dir(folders)
    return view if (view / RUNS_PAGE).is_file() else None


def _segment(name: str) -> str:
    # Run ids and experiment names are rig-made, but a results folder is evidence read as found: a
    # name that is not one path segment of plain characters must not become a path.
    safe = _UNSAFE.sub("_", name)
    return safe if safe.strip(".") else "_" + safe


def attempt_page(experiment: str, run_id: str, attempt: int) -> str:
    """The page of one attempt, relative to the view folder."""
    return f"runs/{_segment(experiment)}/{_segment(run_id)}/attempt-{int(attempt)}.html"
