"""`rig doctor`: which of the rig's protections are active on this machine, and which are not."""

from pathlib import Path

from rig.confine.agent import PRLIMIT, SETPRIV
from rig.confine.network import resolve_network
from rig.confine.proc import TOKEN_REAPER
from rig.confine.sandbox import resolve
from rig.packs.manifest import load_pack
from rig.run import leftovers
from rig.schema import (
    DEFAULT_FILE_BYTES,
    DEFAULT_HEAD_BYTES,
    DEFAULT_TAIL_BYTES,
    Pack,
    Protection,
    SandboxStatus,
)
from rig.verify.audit import toolchain_files
from rig.workspace import protect
from rig.workspace.build import WorkspaceError, check_agent_root, default_runs_root
from rig.workspace.scratch import verify_place

# Per network namespace, unlike /sys/class/net (which shows the namespace sysfs was mounted in).
NET_DEV = Path("/proc/net/dev")
_MIB = 1024 * 1024


def _sandbox(status: SandboxStatus) -> Protection:
    if status.active:
        detail = (
            f"{status.detail}: filesystem read-only but the workspace, the attempt folder and /tmp; "
            "the rig's repository, results, other runs and your home hidden; "
            "own PID namespace; no capabilities"
        )
        return Protection(name="sandbox", active=True, detail=detail)
    return Protection(
        name="sandbox", active=False, detail=f"{status.detail}; every record will carry a warning"
    )


def _network(sandboxed: bool) -> Protection:
    """Whether agents get a network namespace whose only way out is the egress proxy (rig.confine.network)."""
    plan, status = resolve_network("model-only", [], sandboxed, required=False)
    if plan is not None:
        return Protection(
            name="network",
            active=True,
            # The proxy's rule, not a promise: the detail says when an agent (root) could leave it.
            detail=f"{status.detail}: under model-only (the default) the proxy lets an agent reach its model "
            "and nothing else, allowlist adds the listed host:port, every attempt logged (network.jsonl); "
            f"{_machine_network()}",
        )
    return Protection(
        name="network",
        active=False,
        detail=f"{status.detail}: agents can reach any host this machine can, and every record says so; "
        f"{_machine_network()}",
    )


def _machine_network() -> str:
    lines = NET_DEV.read_text().splitlines()[2:] if NET_DEV.is_file() else []
    interfaces = sorted(line.split(":", 1)[0].strip() for line in lines if ":" in line)
    if interfaces == ["lo"]:
        return "this machine itself is loopback only"
    return f"this machine's interfaces: {', '.join(interfaces) or 'unknown'}"


def _runs_root() -> Protection:
    root = default_runs_root()
    try:
        check_agent_root(root)
    except WorkspaceError as exc:
        return Protection(name="runs root", active=False, detail=str(exc))
    return Protection(
        name="runs root",
        active=True,
        detail=f"{root}: outside any repository and context file; {leftovers.usage(root)}",
    )


def _verification_copies() -> Protection:
    # Where a copy goes changes its speed, not what it protects: never reported inactive.
    try:
        place = verify_place(workers=1)
    except (OSError, WorkspaceError) as exc:
        return Protection(name="verification copies", active=False, detail=str(exc))
    detail = f"{place.root or default_runs_root()}, {place.note}"
    if place.room is not None:
        detail += (
            f": up to {place.room // _MIB} MiB per copy with one worker, less with more; "
            "a larger copy is made on disk"
        )
    return Protection(name="verification copies", active=True, detail=detail)


def _process_cleanup(status: SandboxStatus) -> Protection:
    # Only the token reaper can be escaped (env -i): anything stronger holds every process.
    contained = status.processes != TOKEN_REAPER
    detail = f"{status.processes}: {status.processes_detail}"
    if contained:
        detail += "; nothing the agent started outlives it"
    return Protection(name="process cleanup", active=contained, detail=detail)


def diagnose(pack: Pack | None = None) -> list[Protection]:
    """Every protection, in the order a run meets them; protected paths as `pack` (default: the
    built-in pack) defines them."""
    pack = pack or load_pack()
    names = protect.rules_for(pack).describe()
    _plan, status = resolve("auto", hidden=[], exposed=[])
    return [
        _sandbox(status),
        _network(status.active),
        Protection(
            name="provider keys",
            active=True,
            detail="kept outside the agent's sandbox: the CLI holds a placeholder, and a per-run "
            "gateway on 127.0.0.1 puts the key into its requests to the model (docs/keys.md)",
        ),
        _runs_root(),
        _verification_copies(),
        _process_cleanup(status),
        Protection(
            name="runner death",
            active=SETPRIV is not None,
            detail="agents die with a killed runner (setpriv --pdeathsig); a resume kills what they "
            "left (their cgroup leaves, their token)"
            if SETPRIV
            else "setpriv not found: a runner killed with -9 leaves its agents running until a resume",
        ),
        Protection(
            name="file size limit",
            active=PRLIMIT is not None,
            detail=f"no agent file above {DEFAULT_FILE_BYTES // _MIB} MiB by default (prlimit --fsize)"
            if PRLIMIT
            else "prlimit not found: an agent can fill the disk",
        ),
        Protection(
            name="stream bounds",
            active=True,
            detail=f"stdout and stderr keep the first {DEFAULT_HEAD_BYTES // _MIB} MiB and the last "
            f"{DEFAULT_TAIL_BYTES // _MIB} MiB by default (experiment [limits])",
        ),
        Protection(
            name="protected files",
            active=True,
            detail=f"pack {pack.name}: compared and restored byte for byte: {names}",
        ),
        Protection(
            name="verification",
            active=True,
            detail=f"hidden tests by the pack's runner ({pack.spec.runner.kind}) with the rig's own "
            "options; skipped tests fail; canary tests must fail; bytecode in the workspace is ignored; "
            "the gate and the hidden tests run in the agent's sandbox when it has one, with no network",
        ),
        Protection(
            name="audit",
            active=True,
            detail=f"pins of fixture, tasks and hidden tests and {len(toolchain_files())} toolchain files "
            "rechecked after every agent; test-runner probes and reads of the rig's files flagged",
        ),
    ]
