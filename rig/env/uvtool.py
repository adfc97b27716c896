"""Running uv and a build's other commands: each a named step, its output in the build log, a
failure one line naming the step, the command and the log."""

import os
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

from uv import find_uv_bin

from rig.confine.network import Egress
from rig.confine.proc import run_bounded

WHEELS_VAR = "RIG_WHEELS"
# One step of a build (a resolution, an install, a setup line) may take this long before it is
# stopped and the build fails: a hung index or setup script never blocks a run forever.
STEP_TIMEOUT_VAR = "RIG_ENV_STEP_TIMEOUT_S"
DEFAULT_STEP_TIMEOUT_S = 1800.0
# pip's settings and the uv variables that say the same thing: uv reads only its own.
# pip separates several locations by whitespace; uv's variables by what follows each name.
_PIP_TO_UV = {
    "index-url": ("UV_INDEX_URL", " "),
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "find-links": ("UV_FIND_LINKS", ","),
}


class EnvError(Exception):
    """An environment that cannot be built or used; the message is one line naming the fix."""


def uv_bin() -> str:
    """The pinned uv that rig's own distribution installed."""
    return find_uv_bin()


def find_links() -> list[str]:
    """uv's --find-links options for `$RIG_WHEELS` (a local wheel folder, as the tests use)."""
    wheels = os.environ.get(WHEELS_VAR)
    return ["--find-links", wheels] if wheels else []


@cache
def _pip_config(environ: tuple[tuple[str, str], ...]) -> str:
    """`pip config list` under `environ`, asked once per process: a build's every step needs it."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**dict(environ), "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def pip_settings_for_uv(environ: dict[str, str]) -> dict[str, str]:
    """The index settings of pip (pip.conf, PIP_INDEX_URL, ...) as uv variables, where no uv
    variable already says otherwise: uv ignores pip's configuration, and a machine configured for
    pip must build environments from the same index."""
    if any(key in environ for key in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX")):
        return {}
    listed = _pip_config(tuple(sorted(environ.items())))
    found: dict[str, str] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        option = key.rsplit(".", 1)[-1]
        if option not in _PIP_TO_UV:
            continue
        uv_var, separator = _PIP_TO_UV[option]
        # `:env:` (PIP_* variables) beats the files, as it does for pip; later files beat earlier ones.
        if uv_var not in environ and (uv_var not in found or key.startswith(":env:")):
            found[uv_var] = separator.join(value.strip().strip("'\"").split())
    if found and "UV_INDEX_STRATEGY" not in environ:
        # pip takes the best version across all its indexes; uv by default stops at the first index
        # that has the package, which on a machine with a stale extra index installs old versions.
        found["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return found


def base_environ() -> dict[str, str]:
    """The environment every build command runs with: the caller's, pip's index settings for uv,
    and no virtual environment of the caller's leaking into the one being built."""
    environ = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    environ.update(pip_settings_for_uv(environ))
    return environ


def _gist(output: str) -> str:
    """What a failed command said, in a few words: uv's first `error:` line and its innermost cause,
    else the output's last line (a shell's "not found", a setup script's own message)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        return ""
    errors = [line for line in lines if line.startswith("error:")]
    if not errors:
        return lines[-1][:200]
    causes = [line for line in lines if line.lower().startswith(("caused by:", "cause:"))]
    return " / ".join([errors[0], *causes[-1:]])[:300]


def run_step(
    step: str,
    cmd: list[str],
    log: Path,
    cwd: Path,
    environ: dict[str, str],
    capture: bool = False,
    egress: Egress | None = None,
) -> str:
    """Run one step of a build, appending its command and output to `log`; its stdout if `capture`.

    With `egress`, the step runs in a network namespace whose only way out is it
    (rig.env.network). Raises EnvError naming the step, the command and the log, with the
    output's last line.
    """
    shown = shlex.join(cmd)
    if egress is not None:
        cmd, environ = egress.wrap(cmd), {**environ, **egress.env()}
    limit = float(os.environ.get(STEP_TIMEOUT_VAR) or DEFAULT_STEP_TIMEOUT_S)
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ [{step}] {shown}\n")
        out.flush()
        try:
            # Its own process group, killed whole at the limit: a setup line's children die with it.
            done = run_bounded(cmd, cwd, environ, limit)
        except OSError as exc:
            out.write(f"{exc}\n")
            raise EnvError(
                f"environment build failed at step {step}: `{shown}` could not start ({exc.strerror}); "
                f"log: {log}"
            ) from None
        out.write(done.stdout)
        out.write(done.stderr)
        out.write(f"[stopped after {limit:g} s]\n" if done.timed_out else f"[exit {done.returncode}]\n")
    if done.timed_out:
        raise EnvError(
            f"environment build failed at step {step}: `{shown}` took longer than {limit:g} s "
            f"(${STEP_TIMEOUT_VAR}); log: {log}"
        )
    if done.returncode != 0:
        tail = _gist(f"{done.stdout}\n{done.stderr}")
        raise EnvError(
            f"environment build failed at step {step}: `{shown}` exited {done.returncode}"
            f"{f' ({tail})' if tail else ''}; log: {log}"
        )
    return done.stdout if capture else ""
