"""Harness CLIs installed once from the npm registry into the rig's cache: other versions, and the
pinned one where no checkout holds it.

A condition may run its harness at another exact version (`harness_version`), e.g. to ask whether
an upgrade changed anything; a rig installed without a checkout (whose `make setup` installs the
pinned CLIs into harnesses/node) installs the pinned version the same way (`rig harness install`,
or on first use, harnesses.cli). A version is installed with `npm install` into a folder of its own
in a cache keyed by package and version, `<cache>/<package>@<version>/` (a `/` of a scoped package
becomes `+`), with its `package-lock.json` kept beside `node_modules`, so the exact dependency tree
that ran can be read later. The pinned version is installed from harnesses/node/package-lock.json,
so its whole tree is the lock's, as in a checkout; another version's dependencies are resolved by
npm. The cache is `$RIG_HARNESS_CACHE`, else `$XDG_CACHE_HOME/rig/harnesses`, else
`~/.cache/rig/harnesses`.

An install is built in a temporary folder and renamed into place only once npm has succeeded and
the package's own package.json says the version asked for, so a folder in the cache is always
complete; a lock file serialises rigs installing the same version. npm runs with `--prefer-offline`
(a published version never changes, so its cached metadata and tarballs are as good as the
registry's) in an explicit environment: PATH, HOME, and the user's `npm_config_*` and proxy
settings, nothing else of the rig's.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from filelock import FileLock, Timeout

from harnesses.protocol import CliNotFound
from rig.confine.proc import BASE_PATH
from rig.schema import EXACT_VERSION

CACHE_ENV = "RIG_HARNESS_CACHE"
MARKER = "rig-install.json"
# The pinned CLIs: `make setup` installs this lock into harnesses/node; the cache installs from it too.
PINNED_LOCK = Path(__file__).resolve().parent / "node" / "package-lock.json"
BUILD_NAME = "rig-harness-version"
INSTALL_TIMEOUT_S = 900
_PASSED = re.compile(r"^(npm_config_\w+|NPM_CONFIG_\w+|HTTPS?_PROXY|https?_proxy|NO_PROXY|no_proxy)$")


class VersionInstallError(CliNotFound):
    """A harness version that cannot be installed; the message names the cause and the fix."""


class NpmMissing(VersionInstallError):
    """No node or no npm on PATH: no harness CLI can be installed until they are."""


@cache
def _lock() -> dict:
    return json.loads(PINNED_LOCK.read_text())


def pinned_version(package: str) -> str | None:
    """The version of `package` harnesses/node/package-lock.json resolves, if it holds the package."""
    entry = _lock()["packages"].get(f"node_modules/{package}")
    return entry["version"] if entry else None


def check_npm() -> None:
    """Raise NpmMissing, naming what is missing and where to get it, unless node and npm are on PATH."""
    missing = [tool for tool in ("node", "npm") if not shutil.which(tool)]
    if missing:
        raise NpmMissing(
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on PATH, so no harness "
            "CLI can be installed; install Node.js 20 or later with npm (https://nodejs.org, or your "
            "system's nodejs and npm packages), then rerun"
        )


def cache_root() -> Path:
    """Where installed harness versions live (see the module docstring)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "rig" / "harnesses"


def install_dir(package: str, version: str) -> Path:
    """The cache folder of one version of one npm package."""
    return cache_root() / f"{package.replace('/', '+')}@{version}"


def installed_cli(package: str, version: str, binary: str) -> Path:
    """The executable `binary` of an installed `package@version`; CliNotFound if it is not installed."""
    folder = install_dir(package, version)
    cli = folder / "node_modules" / ".bin" / binary
    if not (folder / MARKER).is_file() or not cli.is_file():
        raise CliNotFound(
            f"{package}@{version} is not installed in {folder}: `rig run` installs the harness_version "
            "a condition names before its first run"
        )
    return cli


def install(
    package: str,
    version: str,
    binary: str,
    notify: Callable[[str], None] | None = None,
    force: bool = False,
) -> Path:
    """Install `package@version` into the cache unless it is there; return its executable `binary`.

    `notify` is told once when an install starts (it takes a while). `force` installs it again even
    so (the complete install it replaces stays until the new one is complete). Raises NpmMissing
    without node or npm, VersionInstallError with npm's own reason when the version does not exist,
    the registry cannot be reached, or the package has no executable `binary`.
    """
    if not re.match(EXACT_VERSION, version):
        raise VersionInstallError(
            f"harness_version {version!r} is not an exact version; give one such as 1.2.3 "
            f"(`npm view {package} versions` lists them)"
        )
    folder = install_dir(package, version)
    if not force:
        try:
            return installed_cli(package, version, binary)
        except CliNotFound:
            pass
    # Before the cache is touched: without node or npm, nothing is written.
    check_npm()
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(f"{folder}.lock", timeout=INSTALL_TIMEOUT_S):
            if not force:
                try:
                    return installed_cli(package, version, binary)
                except CliNotFound:
                    pass
            if notify:
                notify(f"installing {package}@{version} from the npm registry into {folder} (once)")
            _install(package, version, binary, folder)
    except Timeout:
        raise VersionInstallError(
            f"another rig has been installing {package}@{version} for {INSTALL_TIMEOUT_S} s; "
            f"wait for it, or remove {folder}.lock if no rig is running"
        ) from None
    return installed_cli(package, version, binary)


def _install(package: str, version: str, binary: str, folder: Path) -> None:
    """Build the install in a temporary folder beside `folder`, then rename it into place. Called
    under the version's lock: a build folder of the version already there is a killed install's."""
    for stale in folder.parent.glob(f".{glob.escape(folder.name)}.*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
    building = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        manifest = {"name": BUILD_NAME, "private": True, "dependencies": {package: version}}
        (building / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if version == pinned_version(package):
            (building / "package-lock.json").write_text(json.dumps(_pinned_lock(package), indent=2) + "\n")
        command = ["npm", "install", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"]
        try:
            proc = subprocess.run(
                command,
                cwd=building,
                env=npm_env(),
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise VersionInstallError(
                f"npm install {package}@{version} did not finish within {INSTALL_TIMEOUT_S} s; "
                "check that the npm registry is reachable"
            ) from None
        if proc.returncode != 0:
            raise VersionInstallError(
                f"npm install {package}@{version} failed ({_reason(proc.stderr or proc.stdout)}); check that "
                f"the version exists (`npm view {package} versions`) and that the registry is reachable"
            )
        got = _package_version(building, package)
        if got != version:
            raise VersionInstallError(f"npm installed {package} {got!r}, not {version!r}; report this")
        if not (building / "node_modules" / ".bin" / binary).is_file():
            raise VersionInstallError(
                f"{package}@{version} has no executable {binary!r}; pick another version"
            )
        marker = {"package": package, "version": version, "installed_at": datetime.now(UTC).isoformat()}
        (building / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        if folder.exists():
            # A folder without the marker: an install interrupted before this one took the lock.
            shutil.rmtree(folder)
        building.rename(folder)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _pinned_lock(package: str) -> dict:
    """harnesses/node's lock with `package` as its only dependency: npm keeps every locked version
    and prunes the other CLIs' trees, and needs no registry metadata (its cache is enough offline)."""
    lock = dict(_lock())
    root = {"name": BUILD_NAME, "dependencies": {package: pinned_version(package)}}
    lock["name"] = BUILD_NAME
    lock["packages"] = {**lock["packages"], "": root}
    return lock


def npm_env() -> dict[str, str]:
    """npm's explicit environment: PATH with node's folder, HOME (npm's cache and .npmrc), and the
    user's npm and proxy settings."""
    node_dir = Path(shutil.which("node") or "/usr/bin/node").parent
    env = {"PATH": f"{node_dir}:{BASE_PATH}", "HOME": str(Path.home()), "LANG": "C.UTF-8"}
    env |= {name: value for name, value in os.environ.items() if _PASSED.match(name)}
    return env


def _package_version(folder: Path, package: str) -> str | None:
    try:
        data = json.loads((folder / "node_modules" / package / "package.json").read_text())
    except (OSError, ValueError):
        return None
    return data.get("version") if isinstance(data, dict) else None


def _reason(output: str) -> str:
    """npm's error on one line: its `npm error` lines, joined, at most 300 characters."""
    lines = [line.removeprefix("npm error").strip() for line in output.splitlines() if line.strip()]
    said = " ".join(line for line in lines if line)
    return (said[:300] + "...") if len(said) > 300 else (said or "no output")
