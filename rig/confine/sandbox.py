"""The agent's sandbox: bubblewrap, when the machine has it.

Inside, the filesystem is read-only except the workspace, the attempt folder (the harness's home,
config and session) and a fresh /tmp. The rig's repository (tasks, reference solutions, decoys,
hidden tests, the pristine fixture), the results folders, every other run's workspace and the
invoking user's home are empty directories; only the interpreter environment and the pinned CLIs
are shown again, read-only. The agent gets its own PID namespace, so every process it leaves
behind dies with it, and no capabilities, so as root it can neither remount nor raise its limits.

Without bubblewrap (mode `auto`, or `off`) the agent's files are unconfined and every record
carries a warning; mode `require` refuses to start instead. The agent then runs as the rig's own
user, so under root that warning says plainly that it runs as root (`AS_ROOT`). Its processes are
contained in every mode, by the strongest means the machine allows (rig.confine.proc.containment: a
cgroup leaf, a PID namespace of its own, the token reaper), which every record names.
"""

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from rig.confine.proc import containment
from rig.schema import SandboxStatus

SandboxMode = Literal["auto", "require", "off"]
SANDBOX_MODES: tuple[str, ...] = ("auto", "require", "off")
BWRAP = "bwrap"
# Points the rig at another bubblewrap; a path that does not exist means "not installed".
BWRAP_ENV = "RIG_BWRAP"
INSTALL_HINT = "install the Debian package bubblewrap (apt-get install bubblewrap)"
_PROBE_TIMEOUT_S = 30
# What bubblewrap's absence leaves an agent of a rig run by root free to do (rig.confine.network
# says what it leaves of its network namespace).
AS_ROOT = (
    "without bubblewrap the agent runs as root: it can read and change any file root can, "
    "outside the workspace too"
)


class SandboxError(Exception):
    """A sandbox that was required but cannot run here; the message says how to get one."""


@dataclass(frozen=True)
class Sandbox:
    """A bubblewrap invocation: what the agent must not see and what it may see again read-only."""

    bwrap: Path
    hidden: tuple[Path, ...]
    exposed: tuple[Path, ...]

    def wrap(
        self,
        command: list[str],
        cwd: Path,
        writable: list[Path],
        read_only: list[Path],
        first_process: bool = False,
        own_network: bool = False,
    ) -> list[str]:
        """`command` run inside the sandbox; `writable` paths are bound read-write, in this order.

        `read_only` paths are bound over the writable ones afterwards (the rig's own stream files
        inside the attempt folder). `first_process`: the command itself is the PID namespace's
        first process, without bubblewrap's reaper, so the kernel kills every process it leaves
        before its exit is reported (with the reaper they die a moment later, when bubblewrap's
        parent is gone): nothing it started still runs when the caller reads what it wrote.
        `own_network`: a network namespace of its own, with only its loopback interface (up).
        """
        args = [
            str(self.bwrap),
            "--die-with-parent",
            "--unshare-pid",
            *(["--as-pid-1"] if first_process else []),
            "--unshare-ipc",
            *(["--unshare-net"] if own_network else []),
            "--cap-drop",
            "ALL",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
        ]
        for path, shown in _mounts(self.hidden, self.exposed):
            if shown:
                args += ["--ro-bind", str(path), str(path)]
            else:
                # Read-only and empty: a write there fails loudly instead of vanishing with the sandbox.
                args += ["--perms", "0555", "--tmpfs", str(path)]
        for path in writable:
            args += ["--bind", str(path), str(path)]
        for path in read_only:
            if path.exists():
                args += ["--ro-bind", str(path), str(path)]
        return [*args, "--chdir", str(cwd), "--", *command]


def _mounts(hidden: tuple[Path, ...], exposed: tuple[Path, ...]) -> list[tuple[Path, bool]]:
    """What to mount, outermost first, each path with whether it is shown (bound read-only) or
    hidden (an empty folder): the deepest of the listed paths above a file decides, so a folder
    hidden inside a shown one is hidden again (an installed rig's venv is shown, and the packs it
    ships, with their solutions and hidden tests, are in it). A hidden path inside one hidden
    already is left out."""
    wanted: dict[Path, bool] = {p.resolve(): False for p in hidden if p.is_dir()}
    wanted.update((p, True) for p in exposed if p.exists())
    mounts: list[tuple[Path, bool]] = []
    for path in sorted(wanted, key=lambda p: len(p.resolve().parts)):
        if path == Path("/"):
            continue
        above = [
            (q, shown) for q, shown in mounts if path != q and path.resolve().is_relative_to(q.resolve())
        ]
        nearest = max(above, key=lambda m: len(m[0].resolve().parts), default=(Path("/"), True))
        # A shown path is always bound: one under /tmp, which the sandbox replaces by a fresh
        # folder, is unseen although no listed folder above it hides it.
        if wanted[path] or nearest[1]:
            mounts.append((path, wanted[path]))
    return mounts


def find_bwrap() -> Path | None:
    """bubblewrap's executable: $RIG_BWRAP if set, else on PATH or in /usr/bin; None if missing."""
    if os.environ.get(BWRAP_ENV):
        chosen = Path(os.environ[BWRAP_ENV])
        return chosen if chosen.is_file() else None
    found = shutil.which(BWRAP) or (f"/usr/bin/{BWRAP}" if Path(f"/usr/bin/{BWRAP}").is_file() else None)
    return Path(found) if found else None


@cache
def probe(bwrap: Path) -> str | None:
    """None if bubblewrap can build a sandbox here, else why not (e.g. no user namespaces)."""
    try:
        proc = subprocess.run(
            [str(bwrap), "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev"]
            + ["--proc", "/proc", "--tmpfs", "/tmp", "--", "/bin/true"],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} did not run ({exc})"
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]
        return f"{bwrap} cannot create a sandbox here: {first}"
    return None


@cache
def bwrap_version(bwrap: Path) -> str:
    """`bwrap --version`, e.g. "bubblewrap 0.8.0"."""
    proc = subprocess.run(
        [str(bwrap), "--version"], capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False
    )
    return proc.stdout.strip() or "bubblewrap (unknown version)"


def resolve(mode: str, hidden: list[Path], exposed: list[Path]) -> tuple[Sandbox | None, SandboxStatus]:
    """The sandbox for `mode` on this machine, and the status every record will carry.

    Raises SandboxError when mode is `require` and bubblewrap is missing or cannot run.
    """
    if mode not in SANDBOX_MODES:
        raise SandboxError(f"unknown sandbox mode {mode!r}; use one of {', '.join(SANDBOX_MODES)}")
    if mode == "off":
        return None, _status(mode, None, "disabled with --sandbox off")
    bwrap = find_bwrap()
    problem = f"bubblewrap not found; {INSTALL_HINT}" if bwrap is None else probe(bwrap)
    if problem:
        if mode == "require":
            raise SandboxError(f"--sandbox require: {problem}; or run with --sandbox auto to accept the risk")
        return None, _status(mode, None, problem)
    assert bwrap is not None
    return Sandbox(bwrap, tuple(hidden), tuple(exposed)), _status(mode, bwrap, bwrap_version(bwrap))


def _status(mode: str, bwrap: Path | None, detail: str) -> SandboxStatus:
    """The status of a run under bubblewrap (`bwrap`) or without it, with its process containment.

    The agent's process picks its containment the same way (rig.confine.agent.run_agent_process).
    """
    if bwrap is None and os.geteuid() == 0:
        detail = f"{detail}; {AS_ROOT}"
    processes = containment(sandboxed=bwrap is not None)
    return SandboxStatus(
        mode=mode,
        active=bwrap is not None,
        backend="bwrap" if bwrap else None,
        detail=detail,
        processes=processes.backend,
        processes_detail=processes.detail,
    )
