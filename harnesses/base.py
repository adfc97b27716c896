"""The harness protocol: what every adapter (pi, claude_code, codex, scripted) provides.

Only step 2 of a run (the agent) knows which harness ran. An adapter runs its CLI in a prepared
workspace and saves the session; turning saved files into metrics is a pure function of those
files, so stored sessions can be re-parsed by later versions of the rig.
"""

import fcntl
import os
import secrets
import selectors
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from rig.proc import AGENT_TOKEN_VAR, RUNNER_VAR, kill_group, process_identity, reap
from rig.sandbox import Sandbox
from rig.streams import DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES, BoundedStream, StreamStats

DEFAULT_STALL_S = 420.0
WATCH_INTERVAL_S = 0.2
# No file an agent writes needs more; a bound keeps a runaway agent from filling the disk.
DEFAULT_FILE_BYTES = 2 * 1024 * 1024 * 1024
# After the agent is gone, how long to wait for the last bytes still in the pipes.
DRAIN_S = 5.0
READ_BYTES = 1024 * 1024
PIPE_BYTES = 1024 * 1024
# Sets the file size limit; without it (util-linux), agents run without one and `rig doctor` says so.
PRLIMIT = shutil.which("prlimit")
# Kills the agent's main process when the thread that started it dies (a runner killed with -9).
SETPRIV = shutil.which("setpriv")
# Agents running now, token -> pid: an interrupted runner kills them all before it exits.
_RUNNING: dict[str, int] = {}
_RUNNING_LOCK = threading.Lock()


@dataclass(frozen=True)
class Confinement:
    """What confines an agent process besides its timeouts: sandbox, stream and file size bounds."""

    sandbox: Sandbox | None = None
    stream_head_bytes: int = DEFAULT_HEAD_BYTES
    stream_tail_bytes: int = DEFAULT_TAIL_BYTES
    file_bytes: int | None = DEFAULT_FILE_BYTES


class Condition(BaseModel):
    """One arm of an experiment: what differs in the workspace and in the harness's options."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    remove_files: list[str] = Field(default_factory=list, description="paths removed from the workspace")
    write_files: dict[str, str] = Field(default_factory=dict, description="path -> content written")
    skills: list[str] = Field(default_factory=list, description="skill directories to install")
    tools: list[str] | None = Field(default=None, description="tool set; None means the default")
    thinking: str | None = None
    harness_options: dict[str, Any] = Field(default_factory=dict)


class AgentRun(BaseModel):
    """What the harness did, as seen from outside: the process and where its logs are."""

    command: list[str]
    exit_code: int | None
    timed_out: bool
    stalled: bool
    wall_s: float
    session_path: Path | None
    stdout_path: Path
    stderr_path: Path
    leftover_processes: int = Field(default=0, description="agent processes still alive after it exited")
    removed_links: list[str] = Field(
        default_factory=list,
        description="symlinks out of run_dir the agent left, removed before the rig writes",
    )
    streams: dict[str, StreamStats] = Field(default_factory=dict)
    sandboxed: bool = False


class Metrics(BaseModel):
    """What the session says the agent did. Every field is derived from saved files only."""

    model: str | None = None
    thinking_level: str | None = None
    assistant_messages: int = 0
    tool_calls: int = 0
    tool_calls_by_name: dict[str, int] = Field(default_factory=dict)
    tool_errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None
    cost_source: str | None = None
    stop_reasons: list[str] = Field(default_factory=list)
    error_messages: list[str] = Field(default_factory=list)
    transport_failures: int = 0
    bash_commands: list[str] = Field(default_factory=list)
    bash_search_commands: list[str] = Field(default_factory=list)
    read_paths: list[str] = Field(default_factory=list)
    docs_read: list[str] = Field(default_factory=list)
    ran_check_script: bool = False
    ran_pytest: bool = False
    read_skill: bool = False
    final_text: str | None = None


class HarnessAdapter(Protocol):
    name: str

    def version(self) -> str: ...

    def run(
        self, workdir: Path, prompt: str, condition: Condition, run_dir: Path, timeout: int
    ) -> AgentRun: ...

    def parse_session(self, run: AgentRun) -> Metrics:
        """Metrics from the saved session and streams of `run` (a pure function of the files)."""
        ...

    def infra_signature(self, run: AgentRun, metrics: Metrics) -> str | None:
        """The name of a harness-specific provider-failure signature seen in this run, if any."""
        ...


def run_agent_process(
    command: list[str],
    cwd: Path,
    env: dict[str, str],
    run_dir: Path,
    timeout: float,
    stall_s: float = DEFAULT_STALL_S,
    session_path: Path | None = None,
    confinement: Confinement | None = None,
) -> AgentRun:
    """Run an agent CLI in its own process group, stdin from /dev/null, streams to run_dir.

    The wall timeout and the silence watchdog both kill the whole group. Silence means that
    neither stdout, stderr nor the session file (or directory) grew for `stall_s` seconds. Once
    the agent's process has exited, every process it started is killed, wherever it went; the
    streams keep a bounded head and tail, and `confinement` may add a sandbox and a file size limit.
    """
    confinement = confinement or Confinement()
    run_dir.mkdir(parents=True, exist_ok=True)
    streams = {
        name: BoundedStream(
            run_dir / f"{name}.log", name, confinement.stream_head_bytes, confinement.stream_tail_bytes
        )
        for name in ("stdout", "stderr")
    }
    token = secrets.token_hex(16)
    argv = _confined(command, cwd, run_dir, confinement, [s.path for s in streams.values()])
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env={**env, AGENT_TOKEN_VAR: token, RUNNER_VAR: process_identity(os.getpid()) or ""},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    with _RUNNING_LOCK:
        _RUNNING[token] = proc.pid
    assert proc.stdout is not None and proc.stderr is not None
    pipes = {proc.stdout.fileno(): streams["stdout"], proc.stderr.fileno(): streams["stderr"]}
    with selectors.DefaultSelector() as selector:
        for fd in pipes:
            _widen_pipe(fd)
            selector.register(fd, selectors.EVENT_READ)
        timed_out = stalled = False
        last_sizes = _activity(streams, session_path)
        last_activity = start
        while proc.poll() is None:
            _drain(selector, pipes, WATCH_INTERVAL_S)
            now = time.monotonic()
            sizes = _activity(streams, session_path)
            if sizes != last_sizes:
                last_sizes, last_activity = sizes, now
            if now - start > timeout:
                timed_out = True
            elif now - last_activity > stall_s:
                stalled = True
            if timed_out or stalled:
                kill_group(proc.pid)
                proc.wait()
                break
        # Children the agent left behind must not outlive the run, nor write after it.
        leftover = reap(token)
        kill_group(proc.pid)
        with _RUNNING_LOCK:
            _RUNNING.pop(token, None)
        removed_links = _remove_outward_links(run_dir)
        deadline = time.monotonic() + DRAIN_S
        while selector.get_map() and time.monotonic() < deadline:
            _drain(selector, pipes, WATCH_INTERVAL_S)
    proc.stdout.close()
    proc.stderr.close()
    stats = {name: stream.close() for name, stream in streams.items()}
    return AgentRun(
        command=command,
        exit_code=None if (timed_out or stalled) else proc.returncode,
        timed_out=timed_out,
        stalled=stalled,
        wall_s=round(time.monotonic() - start, 3),
        session_path=session_path if session_path and session_path.is_file() else None,
        stdout_path=streams["stdout"].path,
        stderr_path=streams["stderr"].path,
        leftover_processes=leftover,
        removed_links=removed_links,
        streams=stats,
        sandboxed=confinement.sandbox is not None,
    )


def _confined(
    command: list[str], cwd: Path, run_dir: Path, confinement: Confinement, logs: list[Path]
) -> list[str]:
    """The command line with the sandbox and the file size limit around `command`."""
    argv = command
    if confinement.sandbox is not None:
        argv = confinement.sandbox.wrap(argv, cwd, writable=[cwd, run_dir], read_only=logs)
    if confinement.file_bytes is not None and PRLIMIT:
        limit = confinement.file_bytes
        argv = [PRLIMIT, f"--fsize={limit}:{limit}", "--", *argv]
    if SETPRIV:
        argv = [SETPRIV, "--pdeathsig", "KILL", "--", *argv]
    return argv


def _remove_outward_links(run_dir: Path) -> list[str]:
    """Remove symlinks in run_dir that lead out of it; their paths relative to run_dir.

    The adapter and the rig write into run_dir after the agent (session copies, ledgers, verdicts):
    a link planted there would carry those writes anywhere on the machine.
    """
    root = run_dir.resolve()
    removed = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                path.unlink()
                removed.append(path.relative_to(root).as_posix())
    return sorted(removed)


def kill_running_agents() -> int:
    """Kill every agent this process is running, with everything they started; how many agents."""
    with _RUNNING_LOCK:
        running = dict(_RUNNING)
    for token, pid in running.items():
        kill_group(pid)
        reap(token)
    return len(running)


def _widen_pipe(fd: int) -> None:
    # A larger pipe means fewer wake-ups for a harness that writes fast.
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass


def _drain(selector: selectors.BaseSelector, pipes: dict[int, BoundedStream], wait: float) -> None:
    """Move whatever the pipes hold into their streams, waiting at most `wait` for the first bytes."""
    # Bounded in time too: a harness that never stops writing must not starve the watchdog.
    deadline = time.monotonic() + wait
    events = selector.select(timeout=wait)
    while events:
        for key, _ in events:
            data = os.read(key.fd, READ_BYTES)
            if data:
                pipes[key.fd].feed(data)
            else:
                selector.unregister(key.fd)
        if not selector.get_map() or time.monotonic() >= deadline:
            return
        events = selector.select(timeout=0)


def _activity(streams: dict[str, BoundedStream], session_path: Path | None) -> tuple[int, ...]:
    return (
        *(s.total for s in streams.values()),
        _size(session_path) if session_path else -1,
    )


def _size(path: Path) -> int:
    """A file's size, or the total of a directory's files (a session whose name comes later)."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size if path.exists() else -1
