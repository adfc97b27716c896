"""The harness protocol: what every adapter (pi, claude_code, codex, scripted) provides.

Only step 2 of a run (the agent) knows which harness ran. An adapter runs its CLI in a prepared
workspace and saves the session; turning saved files into metrics is a pure function of those
files, so stored sessions can be re-parsed by later versions of the rig.
"""

import subprocess
import time
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from rig.proc import kill_group

DEFAULT_STALL_S = 420.0
WATCH_INTERVAL_S = 0.2


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
) -> AgentRun:
    """Run an agent CLI in its own process group, stdin from /dev/null, streams to run_dir.

    The wall timeout and the silence watchdog both kill the whole group. Silence means that
    neither stdout, stderr nor the session file (or directory) grew for `stall_s` seconds.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    stdout_path, stderr_path = run_dir / "stdout.log", run_dir / "stderr.log"
    watched = [stdout_path, stderr_path] + ([session_path] if session_path else [])
    start = time.monotonic()
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        timed_out = stalled = False
        last_sizes = _sizes(watched)
        last_activity = start
        while True:
            try:
                proc.wait(timeout=WATCH_INTERVAL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            sizes = _sizes(watched)
            if sizes != last_sizes:
                last_sizes, last_activity = sizes, now
            if now - start > timeout:
                timed_out = True
            elif now - last_activity > stall_s:
                stalled = True
            if timed_out or stalled:
                kill_group(proc.pid)
                break
        proc.wait()
        kill_group(proc.pid)  # children the agent left behind must not outlive the run
    return AgentRun(
        command=command,
        exit_code=None if (timed_out or stalled) else proc.returncode,
        timed_out=timed_out,
        stalled=stalled,
        wall_s=round(time.monotonic() - start, 3),
        session_path=session_path if session_path and session_path.is_file() else None,
        stdout_path=stdout_path,
        stderr_path=stderr_path,
    )


def _sizes(paths: list[Path]) -> tuple[int, ...]:
    return tuple(_size(p) for p in paths)


def _size(path: Path) -> int:
    """A file's size, or the total of a directory's files (a session whose name comes later)."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size if path.exists() else -1
