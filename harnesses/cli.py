"""What the three real adapters share: finding the pinned CLI, its version, the provider, the env."""

import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

from harnesses import versions
from harnesses.protocol import CliNotFound
from rig.confine.proc import BASE_PATH
from rig.schema import Provider

NODE_BIN = Path(__file__).resolve().parent / "node" / "node_modules" / ".bin"
INSTALL_ENV = "RIG_INSTALL_HARNESSES"


def locate_cli(
    executable: str, env_var: str, package: str | None = None, harness: str | None = None
) -> tuple[str, Path]:
    """Where the CLI a run uses is, as (where, path): `$env_var` if it is set, else the checkout's
    pinned copy under harnesses/node ("checkout"), else the pinned version of `package` installed
    in the rig's cache ("cache", harnesses.versions), else "PATH".

    Raises CliNotFound when none is there, saying to run `rig harness install <harness>`.
    """
    if os.environ.get(env_var):
        path = Path(os.environ[env_var])
        if not path.is_file():
            raise CliNotFound(
                f"${env_var} points at {path}, which does not exist; point it at the CLI or unset it"
            )
        return f"${env_var}", path
    pinned = NODE_BIN / executable
    if pinned.is_file():
        return "checkout", pinned
    if package and (version := versions.pinned_version(package)):
        try:
            return "cache", versions.installed_cli(package, version, executable)
        except CliNotFound:
            pass
    found = shutil.which(executable)
    if found:
        return "PATH", Path(found)
    raise CliNotFound(
        f"{executable} is not installed: run `rig harness install {harness or executable}` "
        f"(`make setup` in a checkout), or set ${env_var} to a copy"
    )


def installs_on_first_use() -> bool:
    """Whether a run that finds no CLI installs the pinned one into the cache, rather than fail.

    $RIG_INSTALL_HARNESSES=1: always; 0: never; unset: only when stdin is a terminal and $CI is
    unset (or false), so a person typing `rig run` gets the CLI and scripts, CI and tests (whose network may
    have no registry) get the error that says to run `rig harness install`.
    """
    value = os.environ.get(INSTALL_ENV, "")
    if value in ("0", "1"):
        return value == "1"
    if value:
        raise CliNotFound(
            f"${INSTALL_ENV} is {value!r}; set it to 1 (install missing harness CLIs on first use) "
            "or 0 (never), or unset it"
        )
    return sys.stdin.isatty() and os.environ.get("CI", "").lower() in ("", "0", "false")


class HarnessVersionError(CliNotFound):
    """A harness CLI whose `--version` cannot be read: a run would pin an unknown harness."""


@cache
def cli_version(path: Path) -> str:
    """The CLI's own `--version` output, first line (stdout, else stderr: Pi prints it there).

    The CLI runs in the environment a run gives it (`base_env`), so the version comes from the very
    node that will run the agent, wherever it is installed (nvm puts it outside the scrubbed PATH).
    Raises HarnessVersionError when the CLI fails or prints nothing: every record pins the harness
    version, and a run that cannot pin it must not start.
    """
    command = [str(path), "--version"]
    fix = "check that it runs (`make setup` reinstalls the pinned CLIs; node must be on PATH)"
    try:
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            env=base_env(Path("/nonexistent"), {}),
        )
    except subprocess.TimeoutExpired:
        raise HarnessVersionError(f"`{path} --version` did not finish within 60 s; {fix}") from None
    except OSError as exc:
        raise HarnessVersionError(f"`{path} --version` cannot start ({exc.strerror or exc}); {fix}") from None
    output = proc.stdout.strip() or proc.stderr.strip()
    if proc.returncode != 0 or not output:
        said = " ".join((proc.stderr.strip() or proc.stdout.strip()).split())[:200]
        raise HarnessVersionError(
            f"cannot read the harness version: `{path} --version` exited {proc.returncode}"
            + (f" ({said})" if said else " with no output")
            + f"; {fix}"
        )
    return output.splitlines()[0].strip()


def base_env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    """The explicit environment of a harness process: nothing inherited but the node binary's PATH."""
    node_dir = Path(shutil.which("node") or "/usr/bin/node").parent
    env = {
        # The rig's interpreter first: a Python gate run as documented (`python <script>`) in the
        # agent's shell uses the pinned ruff and pytest.
        "PATH": f"{Path(sys.executable).parent}:{NODE_BIN}:{node_dir}:{BASE_PATH}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
    }
    env.update(extra)
    return env


# The mock's key when the experiment names none: the mock then checks no key.
MOCK_KEY = "mock-key"


def holds_key(provider: Provider) -> bool:
    """Whether the rig holds a key for `provider` outside the agent's sandbox (rig.confine.keygate):
    every real provider's, and the mock's when it names `api_key_env` (to prove the same path offline)."""
    return provider.kind == "real" or bool(provider.api_key_env)


def api_key(provider: Provider) -> str:
    """The provider's key, read on the host from the variable the experiment names (the mock's
    own without one). It goes to the key gateway, never into the agent's environment or files."""
    if not holds_key(provider):
        return MOCK_KEY
    if not provider.api_key_env or not os.environ.get(provider.api_key_env):
        raise CliNotFound(f"set ${provider.api_key_env or 'API key variable'} for provider {provider.name!r}")
    return os.environ[provider.api_key_env]
