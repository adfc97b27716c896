"""The agent-process supervisor: one agent CLI run confined, watched and stopped.

Every adapter starts its CLI through `run_agent_process`: its own process group (or cgroup leaf,
or PID namespace), inside the sandbox and network plan it was given, its streams bounded, its
stall and wall timeouts and its run budget enforced, and everything it left running killed.
`kill_running_agents` is what an interrupted runner calls before it exits.
"""

import fcntl
import os
import secrets
import selectors
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rig.confine.events import FailedRequest, FailureStreak, FinalEvent, FinalWatch, tap
from rig.confine.network import Egress, NetworkPlan, endpoint_of
from rig.confine.proc import (
    AGENT_TOKEN_VAR,
    JOIN_CGROUP,
    RUNNER_VAR,
    SH,
    Containment,
    ContainmentError,
    containment,
    create_leaf,
    kill_group,
    kill_leaf,
    kill_namespace,
    process_identity,
    reap,
)
from rig.confine.project_env import ProjectEnv
from rig.confine.run_budget import UsageMeter, UsageReader
from rig.confine.sandbox import Sandbox
from rig.confine.session_usage import SessionTail, SessionUsage
from rig.confine.streams import BoundedStream
from rig.schema import (
    DEFAULT_AFTER_FINAL_S,
    DEFAULT_FILE_BYTES,
    DEFAULT_HEAD_BYTES,
    DEFAULT_STALL_S,
    DEFAULT_TAIL_BYTES,
    AgentRun,
    BudgetStop,
    RunBudget,
)

WATCH_INTERVAL_S = 0.2
# How far the silence watchdog walks a session directory without a declared layout: deeper than
# any harness's own (Claude Code's projects/<dir>/<session>.jsonl and its subagents' files).
SIZE_DEPTH = 6
SIZE_ENTRIES = 65536
# After the agent is gone, how long to wait for the last bytes still in the pipes.
DRAIN_S = 5.0
READ_BYTES = 1024 * 1024
PIPE_BYTES = 1024 * 1024
# Sets the file size limit; without it (util-linux), agents run without one and `rig doctor` says so.
PRLIMIT = shutil.which("prlimit")
# Kills the agent's main process when the thread that started it dies (a runner killed with -9).
SETPRIV = shutil.which("setpriv")
# How long the first process of a killed PID namespace may take to see its init gone.
NAMESPACE_EXIT_S = 5.0


@dataclass(frozen=True)
class Confinement:
    """What confines an agent process besides its timeouts: sandbox, process containment, stream
    and file size bounds.

    `processes` None means the strongest containment this machine allows (rig.confine.proc.containment),
    the one rig.confine.sandbox.resolve records. `network` None: the agent uses the machine's network.
    `run_budget`: the agent is stopped once the usage it reports passes it (rig.confine.run_budget).
    `project_env`: the pack's project environment, which every agent gets the same way
    (ProjectEnv.agent_environ; shown read-only inside the sandbox). `after_final_s`: the silence
    after the harness's final answer (its adapter's `final_event`) before the agent is ended.
    """

    sandbox: Sandbox | None = None
    stream_head_bytes: int = DEFAULT_HEAD_BYTES
    stream_tail_bytes: int = DEFAULT_TAIL_BYTES
    file_bytes: int | None = DEFAULT_FILE_BYTES
    processes: Containment | None = None
    network: NetworkPlan | None = None
    run_budget: RunBudget | None = None
    project_env: ProjectEnv | None = None
    after_final_s: float = DEFAULT_AFTER_FINAL_S


@dataclass(frozen=True)
class _Agent:
    """A running agent as an interrupted runner must kill it."""

    pid: int
    leaf: Path | None
    namespace: bool


# Agents running now, by token: an interrupted runner kills them all before it exits.
_RUNNING: dict[str, _Agent] = {}
_RUNNING_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Rules:
    """What may end the agent before it exits besides its timeouts: the run budget's `meter` (fed
    what the session gained by `session` at each look), the silence after its final answer
    (`final`) and its requests failing in a row (`streak`)."""

    meter: UsageMeter | None
    session: SessionTail | None
    final: FinalWatch | None
    streak: FailureStreak | None

    def urgent(self) -> bool:
        """Whether a rule wants the agent stopped before its next request: the budget passed, or its
        requests failed in a row (each request it sends meanwhile costs money or time)."""
        return bool(
            (self.meter is not None and self.meter.stop is not None)
            or (self.streak is not None and self.streak.tripped)
        )


@dataclass
class _Ending:
    """Why the rig ended the agent, if it did."""

    timed_out: bool = False
    stalled: bool = False
    budget: BudgetStop | None = None
    after_final: bool = False
    failed_requests: int | None = None

    @property
    def ended(self) -> bool:
        return bool(self.timed_out or self.stalled or self.budget or self.after_final or self.failed_requests)


def run_agent_process(
    command: list[str],
    cwd: Path,
    env: dict[str, str],
    run_dir: Path,
    timeout: float,
    stall_s: float = DEFAULT_STALL_S,
    session_path: Path | None = None,
    confinement: Confinement | None = None,
    model_url: str | None = None,
    usage: UsageReader | None = None,
    priced_as: str | None = None,
    final_event: FinalEvent | None = None,
    session_usage: SessionUsage | None = None,
    failed_request: FailedRequest | None = None,
) -> AgentRun:
    """Run an agent CLI in its own process group, stdin from /dev/null, streams to run_dir.

    The wall timeout and the silence watchdog both kill the whole group. Silence means that neither
    stdout, stderr nor the session file (or directory) grew for `stall_s` seconds; with
    `session_usage` (the adapter's session layout and reader), the session is the files of that
    layout below `session_path`. With a run budget in `confinement`, so does passing it: `usage`
    (the adapter's live usage reader) reads each stdout line as it arrives, `session_usage` what the
    session files gained at each look (rig.confine.session_usage), costs they cannot report priced
    for model `priced_as` (rig.confine.run_budget); the run's `budget` then says which limit and how
    far. With `final_event` (the adapter's test of a stdout event for its final answer), an agent
    that stays alive and silent for `confinement.after_final_s` after that event is ended too, and
    the run says `ended_after_final` (neither a stall nor a timeout: it is scored on its work). With
    `failed_request` (the adapter's test of a stdout event for a model request's end), an agent
    whose last FAILED_REQUESTS_LIMIT requests all failed is ended, and the run says how many
    (`failed_requests`: infrastructure, however long it would have kept retrying). Once the agent's
    process has exited, every process it started is killed, wherever it went and whatever it did to
    its environment or session (its cgroup, its PID namespace, then its token); the streams keep a
    bounded head and tail, and `confinement` may add a sandbox and a file size limit. With a network
    plan, the agent reaches only the policy's host:port and `model_url`'s, through the rig's egress
    proxy, whose log goes to run_dir once the agent is gone (rig.confine.network).
    Raises ContainmentError if some of its processes cannot be killed, OSError if its cgroup
    cannot be removed (both after the streams are saved).
    """
    confinement = confinement or Confinement()
    meter = None
    if confinement.run_budget is not None:
        if usage is None and (session_usage is None or session_path is None):
            # Refused at config load (harnesses.registry.check_run_budget); never run unbounded.
            raise ValueError("this harness reports no usage while it runs; remove [run_budget]")
        meter = UsageMeter(confinement.run_budget, usage, priced_as)
    # The adapter's session layout is also what the silence watchdog measures: no walk of a whole tree.
    session = (
        SessionTail(session_path, session_usage, meter)
        if session_usage is not None and session_path is not None
        else None
    )
    rules = _Rules(
        meter,
        session,
        FinalWatch(final_event) if final_event is not None else None,
        FailureStreak(failed_request) if failed_request is not None else None,
    )
    if confinement.network is None:
        return _run_agent(
            command, cwd, env, run_dir, timeout, stall_s, session_path, confinement, None, rules
        )
    with Egress(confinement.network, endpoint_of(model_url)) as egress:
        try:
            run = _run_agent(
                command, cwd, env, run_dir, timeout, stall_s, session_path, confinement, egress, rules
            )
        finally:
            outcome = egress.stop()
            egress.write_log(run_dir)
    return run.model_copy(update={"network": outcome})


def _run_agent(
    command: list[str],
    cwd: Path,
    env: dict[str, str],
    run_dir: Path,
    timeout: float,
    stall_s: float,
    session_path: Path | None,
    confinement: Confinement,
    egress: Egress | None,
    rules: _Rules,
) -> AgentRun:
    """run_agent_process's agent, through `egress` when its network is confined, ended early by
    `rules`."""
    contain = confinement.processes or containment(sandboxed=confinement.sandbox is not None)
    run_dir.mkdir(parents=True, exist_ok=True)
    # The meter reads stdout only where the adapter reads usage there.
    meter = rules.meter
    streams = _open_streams(
        run_dir, confinement, tap(meter if meter and meter.reader else None, rules.final, rules.streak)
    )
    token = secrets.token_hex(16)
    leaf = create_leaf(contain.cgroup, token) if contain.cgroup is not None else None
    argv = _confined(
        command, cwd, run_dir, confinement, [s.path for s in streams.values()], contain, leaf, egress
    )
    proxy = egress.env() if egress is not None else {}
    if confinement.project_env is not None:
        env = confinement.project_env.agent_environ(env, cwd)
    start = time.monotonic()
    proc = _start(
        argv,
        cwd,
        {**env, **proxy, AGENT_TOKEN_VAR: token, RUNNER_VAR: process_identity(os.getpid()) or ""},
        leaf,
    )
    agent = _Agent(proc.pid, leaf, contain.namespace)
    with _RUNNING_LOCK:
        _RUNNING[token] = agent
    assert proc.stdout is not None and proc.stderr is not None
    pipes = {proc.stdout.fileno(): streams["stdout"], proc.stderr.fileno(): streams["stderr"]}
    with selectors.DefaultSelector() as selector:
        for fd in pipes:
            _widen_pipe(fd)
            selector.register(fd, selectors.EVENT_READ)
        ending = _watch(
            proc,
            agent,
            selector,
            pipes,
            streams,
            session_path,
            start,
            (timeout, stall_s, confinement.after_final_s),
            rules,
        )
        # Children the agent left behind must not outlive the run, nor write after it.
        leftover, cleanup_error = _kill_leftovers(token, agent, proc)
        removed_links = _remove_outward_links(run_dir)
        deadline = time.monotonic() + DRAIN_S
        while selector.get_map() and time.monotonic() < deadline:
            _drain(selector, pipes, WATCH_INTERVAL_S, lambda: False)
    proc.stdout.close()
    proc.stderr.close()
    stats = {name: stream.close() for name, stream in streams.items()}
    if cleanup_error is not None:
        raise cleanup_error
    return AgentRun(
        command=command,
        exit_code=None if ending.ended else proc.returncode,
        timed_out=ending.timed_out,
        stalled=ending.stalled,
        wall_s=round(time.monotonic() - start, 3),
        session_path=session_path if session_path and session_path.is_file() else None,
        stdout_path=streams["stdout"].path,
        stderr_path=streams["stderr"].path,
        leftover_processes=leftover,
        removed_links=removed_links,
        streams=stats,
        sandboxed=confinement.sandbox is not None,
        processes=contain.backend,
        budget=ending.budget,
        ended_after_final=ending.after_final,
        failed_requests=ending.failed_requests,
    )


def _open_streams(
    run_dir: Path, confinement: Confinement, stdout_tap: Callable[[bytes], None] | None
) -> dict[str, BoundedStream]:
    """The agent's stdout and stderr logs in `run_dir`, bounded; stdout also feeds `stdout_tap`."""
    return {
        name: BoundedStream(
            run_dir / f"{name}.log",
            name,
            confinement.stream_head_bytes,
            confinement.stream_tail_bytes,
            tap=stdout_tap if name == "stdout" else None,
        )
        for name in ("stdout", "stderr")
    }


def _start(argv: list[str], cwd: Path, env: dict[str, str], leaf: Path | None) -> subprocess.Popen:
    """Start the agent in a session of its own, stdin from /dev/null; its cgroup `leaf` is removed
    if it cannot start."""
    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except BaseException:
        if leaf is not None:
            kill_leaf(leaf)
        raise


def _watch(
    proc: subprocess.Popen,
    agent: _Agent,
    selector: selectors.BaseSelector,
    pipes: dict[int, BoundedStream],
    streams: dict[str, BoundedStream],
    session_path: Path | None,
    start: float,
    limits: tuple[float, float, float],
    rules: _Rules,
) -> _Ending:
    """Read the agent's pipes until it exits, or kill it when a rule says so: its run budget, its
    requests failing in a row, the after-final silence, its wall timeout or a stall of silence
    (`limits`: wall timeout, stall and after-final seconds; silence: no stream nor the session
    grew); why it was ended."""
    timeout, stall_s, after_final_s = limits
    meter, final, streak = rules.meter, rules.final, rules.streak
    ending = _Ending()
    last_sizes = _activity(streams, session_path, rules.session)
    last_activity = start
    while proc.poll() is None:
        _drain(selector, pipes, WATCH_INTERVAL_S, rules.urgent)
        now = time.monotonic()
        sizes = _activity(streams, session_path, rules.session)
        if sizes != last_sizes:
            last_sizes, last_activity = sizes, now
        if meter is not None and meter.stop is not None:
            ending.budget = meter.stop
        elif streak is not None and streak.tripped:
            ending.failed_requests = streak.failed
        elif final is not None and final.seen and now - last_activity > after_final_s:
            ending.after_final = True
        elif now - start > timeout:
            ending.timed_out = True
        elif now - last_activity > stall_s:
            ending.stalled = True
        if ending.ended:
            _kill(agent, proc)
            break
    return ending


def _kill_leftovers(token: str, agent: _Agent, proc: subprocess.Popen) -> tuple[int, Exception | None]:
    """Kill what the agent left running (its cgroup leaf, every process with its `token`, its process
    group) and forget it: how many were left, and the error of a leaf that could not be emptied or
    removed, to raise once the streams are saved (they are the evidence)."""
    leftover = 0
    cleanup_error: Exception | None = None
    if agent.leaf is not None:
        try:
            leftover = kill_leaf(agent.leaf)
        except (ContainmentError, OSError) as exc:
            cleanup_error = exc
    leftover += reap(token)
    kill_group(proc.pid)
    with _RUNNING_LOCK:
        _RUNNING.pop(token, None)
    return leftover, cleanup_error


def _confined(
    command: list[str],
    cwd: Path,
    run_dir: Path,
    confinement: Confinement,
    logs: list[Path],
    contain: Containment,
    leaf: Path | None,
    egress: Egress | None,
) -> list[str]:
    """The command line with the sandbox, the process containment and the file size limit around it.

    Inside out: the egress relay in the agent's network namespace (bubblewrap's, or unshare's
    around the PID namespace); bubblewrap or our own PID namespace, whose first process (bwrap's,
    or unshare's parent) is the one whose death kills the namespace, so setpriv must make that one
    die with the runner; prlimit, inherited by all below; outermost the join of the cgroup leaf, so
    that every process of the chain is in it from its first exec.
    """
    argv = command
    if confinement.sandbox is not None:
        if egress is not None:
            argv = egress.wrap(argv)
        argv = confinement.sandbox.wrap(
            argv,
            cwd,
            writable=[cwd, run_dir],
            read_only=[
                *logs,
                *([egress.dir] if egress else []),
                *(confinement.project_env.visible() if confinement.project_env else []),
            ],
            own_network=egress is not None,
        )
    else:
        if contain.unshare is not None:
            argv = [*contain.unshare, "--", *argv]
        if egress is not None:
            argv = egress.wrap(argv)
    if confinement.file_bytes is not None and PRLIMIT:
        limit = confinement.file_bytes
        argv = [PRLIMIT, f"--fsize={limit}:{limit}", "--", *argv]
    if SETPRIV:
        argv = [SETPRIV, "--pdeathsig", "KILL", "--", *argv]
    if leaf is not None:
        argv = [SH, "-c", JOIN_CGROUP, "rig-cgroup", str(leaf / "cgroup.procs"), *argv]
    return argv


def _kill(agent: _Agent, proc: subprocess.Popen | None = None) -> None:
    """SIGKILL the agent: its PID namespace first, then its first process and its process group.

    Given `proc` (the first process), waits until it is gone. The first process of a namespace
    exits only once the kernel has killed everything inside, so it gets that time before it is
    killed itself: killed at once, it would leave them alive for a moment after it.
    """
    if agent.namespace:
        kill_namespace(agent.pid)
        if proc is not None:
            try:
                proc.wait(timeout=NAMESPACE_EXIT_S)
            except subprocess.TimeoutExpired:
                pass  # killed below with its group
    kill_group(agent.pid)
    if proc is not None:
        proc.wait()


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
    """Kill every agent this process is running, with everything they started; how many agents.

    Their cgroup leaves are emptied and removed here, their PID namespaces killed; the threads
    running them find the agents gone. Raises ContainmentError if some process cannot be killed.
    """
    with _RUNNING_LOCK:
        running = dict(_RUNNING)
    for token, agent in running.items():
        _kill(agent)
        if agent.leaf is not None:
            kill_leaf(agent.leaf)
        reap(token)
    return len(running)


def _widen_pipe(fd: int) -> None:
    # A larger pipe means fewer wake-ups for a harness that writes fast.
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass


def _drain(
    selector: selectors.BaseSelector,
    pipes: dict[int, BoundedStream],
    wait: float,
    urgent: Callable[[], bool],
) -> None:
    """Move whatever the pipes hold into their streams, waiting at most `wait` for the first bytes;
    at once when `urgent()` says a rule wants the agent stopped (before its next request)."""
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
        if urgent():
            return
        events = selector.select(timeout=0)


def _activity(
    streams: dict[str, BoundedStream], session_path: Path | None, session: SessionTail | None
) -> tuple[int, ...]:
    """The streams' sizes and the session's: `session`, where the adapter declares its layout,
    measures the files of that layout (reading what they gained, for the run budget)."""
    if session is not None:
        return (*(s.total for s in streams.values()), session.poll())
    return (
        *(s.total for s in streams.values()),
        _size(session_path) if session_path else -1,
    )


def _size(path: Path) -> int:
    """A file's size, or the total of a directory's files (a session whose name comes later); -1
    when there is none.

    The session lies where the agent may write too: nothing is followed through a symlink, the walk
    is bounded (SIZE_DEPTH levels, SIZE_ENTRIES entries), and an entry that vanishes while it is
    measured counts nothing (a harness may replace its session file between two looks)."""
    try:
        info = path.lstat()
    except OSError:
        return -1
    if not stat.S_ISDIR(info.st_mode):
        return info.st_size if stat.S_ISREG(info.st_mode) else -1
    total, seen, pending = 0, 0, [(path, 0)]
    while pending and seen < SIZE_ENTRIES:
        folder, depth = pending.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    seen += 1
                    if seen > SIZE_ENTRIES:
                        break
                    if entry.is_dir(follow_symlinks=False):
                        if depth < SIZE_DEPTH:
                            pending.append((Path(entry.path), depth + 1))
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total
