"""Subprocesses with an explicit environment, their own process group and a hard timeout; and the
containment of an agent's processes, so that none outlives the agent whatever it does.

Containment, strongest first (`containment` picks what this machine allows):

- `bwrap-pidns`: bubblewrap's PID namespace (rig.confine.sandbox); the kernel kills everything in it when
  the agent exits. A cgroup leaf is added where cgroups are available.
- `cgroup`: a cgroup v2 leaf per agent below this process's own cgroup, named after the runner
  (`rig-<PID namespace>-<pid>-<start time>-<token>`) so that a resume finds the leaves of a runner
  killed with -9. The agent joins it before it execs; no environment or session change leaves it,
  and `cgroup.kill` ends all of it at once.
- `pidns`: a PID namespace through `unshare --pid --fork --kill-child` (in a user namespace when
  not root).
- `token-reaper`: processes are found by the token in their environment; one that clears its
  environment (`env -i`) escapes it.

`RIG_CGROUP=off` and `RIG_PIDNS=off` skip a backend: diagnostic switches, to test the weaker ones.
"""

import errno
import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# Every process an agent starts inherits this variable: the reaper finds by it the ones that left
# the agent's process group (setsid, double fork) after the agent itself is gone.
AGENT_TOKEN_VAR = "RIG_AGENT_TOKEN"
# Which runner started the agent ("pid:start time"): an agent whose runner is gone is an orphan.
RUNNER_VAR = "RIG_RUNNER"
_REAP_ROUNDS = 100
# What run_bounded keeps of each stream, at its start and at its end.
OUTPUT_KEEP_BYTES = 8 * 1024 * 1024
# How long run_bounded reads after its command exited, from children that still hold its pipes.
DRAIN_S = 5.0
# How long an interrupted runner waits for the commands it killed to be gone.
KILL_WAIT_S = 5.0
# Process groups of the commands run_bounded is running now, killed when the runner is interrupted.
_COMMANDS: set[int] = set()
_COMMANDS_LOCK = threading.Lock()
_REAP_PAUSE_S = 0.02

BWRAP_PIDNS, CGROUP, PIDNS, TOKEN_REAPER = "bwrap-pidns", "cgroup", "pidns", "token-reaper"
CGROUP_ENV, PIDNS_ENV, OFF = "RIG_CGROUP", "RIG_PIDNS", "off"
UNSHARE = shutil.which("unshare")
SH = "/bin/sh"
# Moves the shell itself into the leaf, then becomes the agent: no preexec_fn, which is unsafe in a
# runner with threads, and nothing the agent starts is ever outside the leaf.
JOIN_CGROUP = 'echo $$ > "$1" && shift && exec "$@"'
# rig-<runner's PID namespace>-<runner pid>-<runner start time>-<token>: pids are only comparable
# within one namespace, so a runner judges only the leaves of runners in its own.
_LEAF_NAME = re.compile(r"^rig-(\d+-\d+-\d+)-[0-9a-f]+$")
# SIGKILL takes effect in microseconds; only a process stuck in the kernel (D state) takes longer.
LEAF_EMPTY_S = 10.0
_FREEZE_S = 1.0
# As root: a plain PID namespace. Otherwise (or in a container without CAP_SYS_ADMIN) inside a user
# namespace, keeping the user's own uid where unshare can, so agents do not think they are root.
_UNSHARE_FLAGS: tuple[tuple[str, ...], ...] = (
    (),
    ("--user", "--map-current-user"),
    ("--user", "--map-root-user"),
)
_PROBE_TIMEOUT_S = 30


class ContainmentError(RuntimeError):
    """Processes of an agent that could not be killed: no verdict may be taken while they run."""


class Stopping(RuntimeError):
    """A command asked for once kill_running_commands has run: the process is stopping."""


# Set by kill_running_commands: the process is stopping, and run_bounded starts nothing more (a
# worker thread whose command was just killed goes on to its next step, whose command would
# otherwise outlive the process).
_STOPPING = threading.Event()


# Only what an interpreter needs. Anything inherited (CI, PYTHONPATH, proxies, user config)
# could change what a check or an agent does without showing up in any record.
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


def scrubbed_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A minimal environment for a verification subprocess, with `home` as HOME."""
    env = {
        "PATH": BASE_PATH,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "NO_COLOR": "1",
        # Only the plugins verification names: an installed distribution cannot add its own.
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        # npm (a gate's `npm test`) asks the registry for a newer npm and prints a notice, which
        # would be the last line a failing gate's verdict shows.
        "npm_config_update_notifier": "false",
    }
    env.update(extra or {})
    return env


@dataclass
class Completed:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float


def run_bounded(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> Completed:
    """Run `cmd` in its own session; on timeout the whole process group is killed.

    What it prints is bounded too: the agent's code runs inside (the gate imports it), and may
    print without end. Each stream keeps its first and last OUTPUT_KEEP_BYTES, with a marker
    between; once the command has exited, children still holding its pipes get DRAIN_S.
    """
    if _STOPPING.is_set():
        raise Stopping(f"stopping: {cmd[0]} was not started")
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    with _COMMANDS_LOCK:
        _COMMANDS.add(proc.pid)
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    streams = {out_fd: _Capped(), err_fd: _Capped()}
    timed_out = False
    try:
        with selectors.DefaultSelector() as selector:
            for fd in streams:
                selector.register(fd, selectors.EVENT_READ)
            deadline = start + timeout
            while selector.get_map():
                now = time.monotonic()
                if proc.poll() is not None:
                    deadline = min(deadline, now + DRAIN_S)
                if now >= deadline:
                    timed_out = proc.poll() is None
                    break
                for key, _ in selector.select(min(deadline - now, 0.5)):
                    data = os.read(key.fd, 1024 * 1024)
                    if data:
                        streams[key.fd].feed(data)
                    else:
                        selector.unregister(key.fd)
    finally:
        kill_group(proc.pid)  # on a timeout, and children left behind by a finished command
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        with _COMMANDS_LOCK:
            _COMMANDS.discard(proc.pid)
    out, err = streams[out_fd].text(), streams[err_fd].text()
    return Completed(None if timed_out else proc.returncode, out, err, timed_out, time.monotonic() - start)


class _Capped:
    """One stream of a bounded command: its head and its tail, with a count of what lies between."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.omitted = 0

    def feed(self, data: bytes) -> None:
        room = OUTPUT_KEEP_BYTES - len(self.head)
        self.head += data[:room]
        self.tail += data[room:]
        if len(self.tail) > 2 * OUTPUT_KEEP_BYTES:
            cut = len(self.tail) - OUTPUT_KEEP_BYTES
            self.omitted += cut
            del self.tail[:cut]

    def text(self) -> str:
        tail = bytes(self.tail[-OUTPUT_KEEP_BYTES:])
        omitted = self.omitted + len(self.tail) - len(tail)
        marker = f"\n[rig: {omitted} bytes omitted]\n".encode() if omitted else b""
        return (bytes(self.head) + marker + tail).decode("utf-8", errors="replace")


def kill_running_commands(for_good: bool = True) -> int:
    """Kill every command run_bounded is running (with its process group), and wait up to
    KILL_WAIT_S for them to be gone; how many. `for_good`: the process is on its way out, and no
    command starts after this (Stopping); a worker that goes on serving passes False.

    An interrupted runner calls it: verification processes live in sessions of their own, so no
    terminal signal reaches them. Its own children that lead a session are killed too. SIGKILL
    takes effect when the target next runs: without the wait a loaded machine can show a killed
    command alive after the runner has exited.
    """
    if for_good:
        _STOPPING.set()
    with _COMMANDS_LOCK:
        registered = set(_COMMANDS)
    # /proc is read outside the lock: a signal handler that interrupts this must never find it held.
    running = sorted(registered | _own_sessions())
    for pgid in running:
        kill_group(pgid)
    deadline = time.monotonic() + KILL_WAIT_S
    for pgid in running:
        while _group_exists(pgid) and time.monotonic() < deadline:
            time.sleep(0.02)
    # A worker thread that was starting a command when the stop came (past the check, not yet
    # registered) has started it by now: its session is found and killed too.
    late = sorted(_own_sessions() - set(running))
    for pgid in late:
        kill_group(pgid)
    return len(running) + len(late)


def _own_sessions() -> set[int]:
    """This process's children that lead sessions of their own: the commands run_bounded started,
    one not yet registered among them (an interrupt can come between its start and its
    registration, when Popen is still returning)."""
    me = os.getpid()
    # Fields after the command name: state, ppid, pgrp, session.
    return {
        pid
        for pid, fields in _process_stats()
        if len(fields) > 3 and int(fields[1]) == me and int(fields[3]) == pid
    }


def _proc_files(name: str) -> Iterator[tuple[int, bytes]]:
    """(pid, the bytes of /proc/PID/`name`) of every live process whose file this process may read."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            yield int(entry.name), Path(entry.path, name).read_bytes()
        except OSError:
            continue


def _process_stats() -> Iterator[tuple[int, list[str]]]:
    """(pid, the fields of its /proc/PID/stat after the command name: state, ppid, pgrp, session,
    ...) of every live process."""
    for pid, stat in _proc_files("stat"):
        # pid (comm) state ppid ...: comm may hold spaces and parentheses itself.
        yield pid, stat.rpartition(b")")[2].decode(errors="replace").split()


def _group_exists(pgid: int) -> bool:
    """Whether any process (a zombie included) is still in process group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group; already gone is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def processes_with_env(name: str, value: str) -> list[int]:
    """Pids of live processes whose environment holds `name=value` (zombies have none)."""
    needle = f"{name}={value}".encode()
    return [pid for pid, environ in _proc_files("environ") if needle in environ.split(b"\0")]


def reap(token: str) -> int:
    """SIGKILL every process carrying the agent `token` until none is left; how many there were.

    Repeated because a process may fork between the scan and the kill.
    """
    killed: set[int] = set()
    for _ in range(_REAP_ROUNDS):
        pids = [p for p in processes_with_env(AGENT_TOKEN_VAR, token) if p != os.getpid()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        killed.update(pids)
        time.sleep(_REAP_PAUSE_S)
    return len(killed)


def process_identity(pid: int) -> str | None:
    """ "pid:start time" of a live process (a reused pid gets another start time), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count fields after the last ")".
    fields = stat.rsplit(")", 1)[1].split()
    return f"{pid}:{fields[19]}"


def reap_orphans() -> int:
    """Kill agents whose runner died (kill -9 leaves their helpers behind); how many processes.

    They are found by the runner identity in their environment and in the name of their cgroup
    leaf, which also holds those that cleared their environment; the leaves are removed.
    """
    killed = 0
    prefix = f"{RUNNER_VAR}=".encode()
    for pid, environ in _proc_files("environ"):
        runner = next((v[len(prefix) :] for v in environ.split(b"\0") if v.startswith(prefix)), None)
        if runner is None or process_identity(int(runner.split(b":")[0])) == runner.decode():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed + _reap_orphan_leaves()


def _reap_orphan_leaves() -> int:
    """Kill and remove the cgroup leaves of runners that are gone; how many processes they held."""
    killed = 0
    # Anywhere in the hierarchy: the dead runner may have run in another cgroup (another session).
    for point, _root in _cgroup2_mounts():
        for dirpath, dirnames, _files in os.walk(point):
            for name in list(dirnames):
                found = _LEAF_NAME.match(name)
                if found is None:
                    continue
                dirnames.remove(name)  # cgroups an agent made inside its leaf go with the leaf
                runner = found.group(1)
                namespace, pid, _start = runner.split("-")
                if int(namespace) != _pid_namespace() or runner_tag(int(pid)) == runner:
                    continue
                try:
                    killed += kill_leaf(Path(dirpath, name))
                except PermissionError:
                    continue  # another user's runner: not ours to reap
    return killed


def _children(pid: int) -> list[int]:
    """Pids of the live children of `pid`."""
    return [child for child, fields in _process_stats() if len(fields) > 1 and int(fields[1]) == pid]


def kill_namespace(pid: int) -> None:
    """SIGKILL the children of `pid`: under unshare or bubblewrap, the init of the agent's PID namespace.

    The kernel then kills every process of the namespace before `pid` (which waits for its child)
    can exit, so once `pid` is gone none of them is left. Killing `pid` first would leave them
    running for a moment after it.
    """
    for child in _children(pid):
        try:
            os.kill(child, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass(frozen=True)
class Containment:
    """How an agent's processes are held so that none outlives it: the layers this machine allows.

    `cgroup` is the folder a leaf per agent goes into, `unshare` the command prefix of a PID
    namespace; the token reaper always runs last. `detail` says what is used and why not the rest.
    """

    sandboxed: bool
    cgroup: Path | None = None
    unshare: tuple[str, ...] | None = None
    detail: str = ""

    @property
    def backend(self) -> str:
        """The strongest layer: bwrap-pidns, cgroup, pidns or token-reaper."""
        if self.sandboxed:
            return BWRAP_PIDNS
        if self.cgroup is not None:
            return CGROUP
        if self.unshare is not None:
            return PIDNS
        return TOKEN_REAPER

    @property
    def namespace(self) -> bool:
        """Whether the agent's first process is the parent of a PID namespace's init."""
        return self.sandboxed or self.unshare is not None


def containment(sandboxed: bool) -> Containment:
    """The strongest process containment this machine allows (bubblewrap's when `sandboxed`).

    The cgroup leaf is added even under bubblewrap; a PID namespace of our own only where neither
    is available. The probes run once per process; the RIG_CGROUP and RIG_PIDNS switches are read
    at every call.
    """
    parts = ["bubblewrap's PID namespace"] if sandboxed else []
    cgroup = unshare = None
    if os.environ.get(CGROUP_ENV) == OFF:
        parts.append(f"no cgroup ({CGROUP_ENV}=off)")
    else:
        cgroup, how = _cgroup_probe()
        parts.append(how if cgroup else f"no cgroup: {how}")
    if not sandboxed and cgroup is None:
        if os.environ.get(PIDNS_ENV) == OFF:
            parts.append(f"no PID namespace ({PIDNS_ENV}=off)")
        else:
            unshare, how = _pidns_probe()
            parts.append(how if unshare else f"no PID namespace: {how}")
    if sandboxed or cgroup or unshare:
        parts.append("then the token reaper")
    else:
        parts.append("only the token reaper: a process that clears its environment (env -i) escapes it")
    return Containment(sandboxed, cgroup, unshare, "; ".join(parts))


def _unescape(field: str) -> str:
    """A path of /proc/self/mountinfo, where space, tab, newline and backslash are octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _cgroup2_mounts() -> list[tuple[Path, str]]:
    """(mount point, folder of the hierarchy mounted there) of every cgroup v2 mount."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        fields = line.split()
        # Optional fields end with "-"; the filesystem type follows it.
        rest = fields[fields.index("-") + 1 :]
        if rest[:1] == ["cgroup2"]:
            mounts.append((Path(_unescape(fields[4])), _unescape(fields[3])))
    return mounts


def own_cgroup() -> Path | None:
    """This process's cgroup v2 folder, None where no cgroup v2 mount shows it."""
    try:
        entries = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    path = next((entry[3:] for entry in entries if entry.startswith("0::")), None)
    if path is None:
        return None
    for point, root in _cgroup2_mounts():
        root = root.rstrip("/")
        if path == root or path.startswith(f"{root}/"):
            inner = path[len(root) :].strip("/")
            return point / inner if inner else point
    return None


def _pid_namespace() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def runner_tag(pid: int) -> str | None:
    """ "PID namespace-pid-start time" of a live process of our PID namespace, None if gone."""
    identity = process_identity(pid)
    return f"{_pid_namespace()}-{identity.replace(':', '-')}" if identity else None


def leaf_name(token: str) -> str:
    """The cgroup leaf of one agent: the runner's identity in it lets a resume find orphans."""
    tag = runner_tag(os.getpid())
    if tag is None:
        raise ContainmentError("/proc/self/stat is unreadable; mount /proc to run agents")
    return f"rig-{tag}-{token}"


def create_leaf(parent: Path, token: str) -> Path:
    """A new, empty cgroup below `parent` for the agent of `token`."""
    leaf = parent / leaf_name(token)
    try:
        leaf.mkdir()
    except OSError as exc:
        raise ContainmentError(
            f"cannot create the agent's cgroup {leaf} ({exc.strerror}); see `rig doctor`, "
            f"or set {CGROUP_ENV}={OFF} to contain agents without cgroups"
        ) from exc
    return leaf


def leaf_members(leaf: Path) -> list[int]:
    """Pids in the cgroup `leaf` and in any cgroup the agent created inside it."""
    pids: list[int] = []
    for dirpath, _dirs, _files in os.walk(leaf):
        pids += [int(pid) for pid in Path(dirpath, "cgroup.procs").read_text().split()]
    return pids


def _events(leaf: Path) -> dict[str, str]:
    lines = (leaf / "cgroup.events").read_text().splitlines()
    return dict(line.split(" ", 1) for line in lines if " " in line)


def _signal_leaf(leaf: Path, use_kill_file: bool) -> None:
    """One SIGKILL to every process in the cgroup `leaf` and below it, without waiting.

    `use_kill_file`: through cgroup.kill (Linux 5.14+), which also catches processes forking at
    that moment. Otherwise each listed pid is killed, inside a frozen cgroup where the kernel has
    cgroup.freeze, so that none forks between the listing and the kills.
    """
    if use_kill_file:
        (leaf / "cgroup.kill").write_text("1")
        return
    freezer = leaf / "cgroup.freeze"
    freezable = freezer.exists()
    if freezable:
        freezer.write_text("1")
        deadline = time.monotonic() + _FREEZE_S
        while _events(leaf).get("frozen") != "1" and time.monotonic() < deadline:
            time.sleep(_REAP_PAUSE_S)
    try:
        for pid in leaf_members(leaf):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    finally:
        if freezable:
            freezer.write_text("0")


def kill_leaf(leaf: Path, timeout: float = LEAF_EMPTY_S) -> int:
    """Kill everything in the cgroup `leaf`, wait until it is empty and remove it; how many it held.

    A leaf already gone held none. Raises ContainmentError if processes survive `timeout` seconds.
    """
    return _empty_leaf(leaf, timeout, (leaf / "cgroup.kill").exists())


def _empty_leaf(leaf: Path, timeout: float, use_kill_file: bool) -> int:
    held = 0
    try:
        held = len(leaf_members(leaf))
        deadline = time.monotonic() + timeout
        while not _removed(leaf, deadline):
            if time.monotonic() > deadline:
                raise ContainmentError(
                    f"processes {leaf_members(leaf)} of the agent's cgroup {leaf} survived SIGKILL for "
                    f"{timeout:.0f} s; no verdict is taken while they run: see where they hang "
                    "(/proc/PID/stack), then rerun"
                )
            _signal_leaf(leaf, use_kill_file)
            time.sleep(_REAP_PAUSE_S)
    except OSError as exc:
        # Removed meanwhile by the thread that interrupted the run, or by a resuming runner: a
        # cgroup the kernel is tearing down answers ENODEV, one already gone ENOENT.
        if exc.errno not in (errno.ENOENT, errno.ENODEV):
            raise
    return held


def _removed(leaf: Path, deadline: float) -> bool:
    """Remove the cgroup `leaf` and the cgroups inside it once no process is left in them; False
    while one is. The kernel can answer EBUSY for a moment after `populated` went to 0 (the last
    exit not yet complete), which counts as not empty until `deadline`."""
    if _events(leaf).get("populated") == "1":
        return False
    try:
        # Children before parents: a cgroup with cgroups inside cannot be removed.
        for dirpath, _dirs, _files in os.walk(leaf, topdown=False):
            os.rmdir(dirpath)
    except OSError as exc:
        if exc.errno != errno.EBUSY or time.monotonic() > deadline:
            raise
        return False
    return True


def try_command(cmd: list[str]) -> tuple[str, str | None]:
    """(stdout of `cmd`, None) if it exits 0, else (stdout, the last line of its stderr): a probe of
    what this machine allows, bounded in time, in a minimal environment."""
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env={"PATH": BASE_PATH},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", str(exc)
    if proc.returncode == 0:
        return proc.stdout, None
    return proc.stdout, (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]


@cache
def _cgroup_probe() -> tuple[Path | None, str]:
    """(the folder agent leaves go into, what they do), or (None, why cgroups cannot be used here)."""
    base = own_cgroup()
    if base is None:
        return None, "no cgroup v2 hierarchy shows this process (/proc/self/cgroup, /proc/self/mountinfo)"
    # A leaf like an agent's: if this runner dies during the probe, a resume removes it.
    leaf = base / leaf_name(secrets.token_hex(16))
    try:
        leaf.mkdir()
    except OSError as exc:
        return None, f"cannot create a cgroup in {base} ({exc.strerror})"
    method = "cgroup.kill" if (leaf / "cgroup.kill").exists() else "cgroup.freeze and SIGKILL to each"
    _out, problem = try_command([SH, "-c", JOIN_CGROUP, "rig-cgroup", str(leaf / "cgroup.procs"), "true"])
    try:
        kill_leaf(leaf)
    except (OSError, ContainmentError) as exc:
        return None, f"cannot remove the cgroup {leaf} ({exc})"
    if problem:
        return None, f"cannot move a process into a cgroup in {base} ({problem})"
    return base, f"a cgroup v2 leaf per agent in {base}, killed whole ({method}) when the agent ends"


@cache
def _pidns_probe() -> tuple[tuple[str, ...] | None, str]:
    """(the unshare prefix that gives an agent its PID namespace, what it is), or (None, why not)."""
    if UNSHARE is None:
        return None, "unshare not found (install util-linux)"
    problem = None
    for flags in _UNSHARE_FLAGS:
        prefix = (UNSHARE, *flags, "--pid", "--fork", "--kill-child")
        out, problem = try_command([*prefix, "--", SH, "-c", "echo $$"])
        # The shell must be the namespace's init, or the kernel would not kill the rest with it.
        if problem is None and out.strip() == "1":
            return prefix, f"a PID namespace per agent ({' '.join(['unshare', *prefix[1:]])})"
        problem = problem or f"the agent would be pid {out.strip()}, not the namespace's init"
    return None, f"unshare cannot create a PID namespace here ({problem})"
