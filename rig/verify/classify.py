"""Infrastructure failures: runs that say nothing about the agent and are quarantined, then rerun.

Shared rules come first, then the harness's own provider-failure signatures. Every verdict names
the rule that fired so a reader can check it against the session. A run the rig itself failed is
`rig_error`, or `disk_full` when what failed was a full disk (`full_disk`): then no run can go on.
"""

import errno
import os
from collections.abc import Iterator
from pathlib import Path

from rig.confine.untrusted import NoRoom
from rig.schema import AgentRun, InfraVerdict, Metrics
from rig.workspace.scratch import disk_name

ERROR_STOPS = {"error", "aborted"}
DISK_FULL = "disk_full"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# How the tools the rig runs (git, a tree copy) say it in their own error messages.
_NO_SPACE_TEXT = tuple(os.strerror(code) for code in _NO_SPACE)
# Below this share of its blocks or inodes free, a disk whose error message said it was full is.
NEARLY_FULL = 0.01


def classify(
    run: AgentRun, metrics: Metrics, signature: str | None, stall_s: float, tool_pending: bool = False
) -> InfraVerdict:
    """Decide whether a run failed for reasons outside the agent's control.

    Silence is infrastructure only while the harness waited for the model (`stalled_provider`);
    silence while a tool call the agent started was still running (`tool_pending`, from the
    adapter) is the agent's own hang, scored like any other failure (see hang_kind). A run the rig
    stopped at its run budget is the agent's: the model answered enough to spend it. A run the rig
    ended for its failed requests in a row (`failed_requests`) is infrastructure, under the
    harness's own signature when it has one.
    """
    if run.budget is not None:
        return InfraVerdict()
    if run.stalled and not tool_pending:
        return InfraVerdict(
            is_infra=True,
            rule="stalled_provider",
            detail=f"no output for {stall_s:g}s while waiting for the model; group killed",
        )
    if run.stalled:
        return InfraVerdict()
    if run.failed_requests:
        ended = f"the rig ended it after {run.failed_requests} model requests failed in a row"
        return InfraVerdict(
            is_infra=True,
            rule=signature or "failed_requests",
            detail="; ".join([ended, *metrics.error_messages[:2]]),
        )
    if signature:
        return InfraVerdict(
            is_infra=True, rule=signature, detail="; ".join(metrics.error_messages[:3]) or None
        )
    if metrics.assistant_messages == 0:
        return InfraVerdict(
            is_infra=True,
            rule="no_model_turn",
            detail="; ".join(metrics.error_messages[:3]) or f"exit {run.exit_code}, no assistant message",
        )
    if metrics.tool_calls == 0 and metrics.stop_reasons and set(metrics.stop_reasons) <= ERROR_STOPS:
        return InfraVerdict(
            is_infra=True, rule="only_error_responses", detail="; ".join(metrics.error_messages[:3]) or None
        )
    return InfraVerdict()


def hang_kind(run: AgentRun, tool_pending: bool) -> str | None:
    """`agent_hang` (silence while a tool call ran), `timeout` (the wall clock), else None."""
    if run.stalled and tool_pending:
        return "agent_hang"
    if run.timed_out:
        return "timeout"
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and every exception it was raised from or while handling, each once."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _free_share(place: Path) -> float:
    """The share of its disk's blocks or inodes, whichever is less, still free for `place` (its
    nearest existing folder); 1.0 if it cannot be told."""
    for folder in (place, *place.parents):
        try:
            fs = os.statvfs(folder)
        except OSError:
            continue
        blocks = fs.f_bavail / fs.f_blocks if fs.f_blocks else 1.0
        # Some file systems (btrfs) have no fixed number of inodes and report none.
        inodes = fs.f_favail / fs.f_files if fs.f_files else 1.0
        return min(blocks, inodes)
    return 1.0


def full_disk(exc: BaseException, places: list[Path]) -> str | None:
    """The disk `exc` found full, as rig.workspace.scratch.disk_name shows it (`/home (ext4)`); None
    if nothing says a disk was full.

    A disk was full when an exception in the chain is an OSError ENOSPC or EDQUOT, a copy of the
    workspace that found no room (NoRoom: on disk only its file system being full raises it out of
    step 3), or an error whose message has their text (git's, a tree copy's). The disk is the one
    of the file the error names, else the fullest of `places` (what the attempt writes to: its
    folder, the workspaces, the copies; at least one).

    An agent can put that text in an error of the rig's (a file name git quotes): a message alone
    counts only when one of `places` really is (nearly) full, so that no agent stops an experiment
    with a file name.
    """
    full, said, named = False, False, None
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno in _NO_SPACE:
            full = True
            # A name relative to a directory descriptor says nothing of where it was.
            if named is None and isinstance(link.filename, str) and os.path.isabs(link.filename):
                named = Path(link.filename)
        elif isinstance(link, NoRoom):
            full = True
        elif any(text in str(link) for text in _NO_SPACE_TEXT):
            said = True
    fullest = min(places, key=_free_share)
    if not full and not (said and _free_share(fullest) < NEARLY_FULL):
        return None
    return disk_name(named or fullest)
