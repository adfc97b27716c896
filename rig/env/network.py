"""An environment build's network: only the package indexes the user configured.

Every command of a build (uv's resolve and installs, the setup lines) runs in a network namespace
of its own whose only way out is the rig's egress proxy (rig.confine.network), which lets through
the configured indexes' host:port and nothing else, and logs every attempt beside the build log.
The indexes are read from uv's variables (after pip's settings were passed to them): UV_INDEX_URL,
UV_DEFAULT_INDEX, UV_INDEX, UV_EXTRA_INDEX_URL and UV_FIND_LINKS; without any, PyPI (pypi.org and
files.pythonhosted.org, where its files are). A node build's are the registries npm's configuration
names (registry.npmjs.org by default), and for yarn those of its own configuration
(registry.yarnpkg.com by default) and the hosts of the URLs its lockfile pins. `$RIG_ENV_ALLOW` adds
host:port entries, comma
separated (an index whose files are served from another host). Where the machine cannot make a
network namespace the build runs on the machine's network, and its log says so.
"""

import json
import re
import shlex
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from rig.confine.network import Egress, endpoint_of, resolve_network
from rig.env.node import node_lock
from rig.env.uvtool import EnvError
from rig.schema import EnvironmentSpec, parse_host_port

ALLOW_VAR = "RIG_ENV_ALLOW"
PYPI = ("pypi.org:443", "files.pythonhosted.org:443")
NPM_REGISTRY = "https://registry.npmjs.org/"
# yarn's default registry, 1 and 2+ alike (`yarn config get npmRegistryServer`).
YARN_REGISTRY = "https://registry.yarnpkg.com"
# Where a yarn lockfile pins a URL: yarn 1's `resolved`, yarn 2+'s `resolution` of a tarball or git URL.
_LOCKED_URL = re.compile(r'^\s+(?:resolved|resolution:)\s+"?[^"\s]*?(https?://[^"\s#]+)', re.MULTILINE)
# uv's index variables; each may hold several URLs (UV_INDEX as `name=url` entries).
_INDEX_VARS = ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS")


def index_endpoints(environ: dict[str, str]) -> list[str]:
    """The host:port a build may reach under `environ`: its configured indexes, else PyPI, plus
    `$RIG_ENV_ALLOW`. Raises EnvError for an entry of RIG_ENV_ALLOW that is no host:port."""
    found: list[str] = []
    for var in _INDEX_VARS:
        for entry in re.split(r"[\s,]+", environ.get(var, "")):
            url = entry.partition("=")[2] if "=" in entry and "://" not in entry.partition("=")[0] else entry
            endpoint = endpoint_of(url) if url.startswith(("http://", "https://")) else None
            if endpoint is not None:
                found.append(f"{endpoint[0]}:{endpoint[1]}")
    if not any(environ.get(var) for var in ("UV_INDEX_URL", "UV_DEFAULT_INDEX")):
        found += PYPI
    found += _allowed(environ)
    return list(dict.fromkeys(found))


def node_endpoints(environ: dict[str, str], project: Path, spec: EnvironmentSpec) -> list[str]:
    """The host:port a node build may reach: the registries npm's configuration names for
    `project` (its .npmrc, the user's, npm_config_* variables; scoped registries too), which npm
    installs pnpm and yarn from and pnpm and yarn 1 read too; for yarn, the registries of its own
    configuration and the hosts of its lockfile's URLs (yarn_urls); plus `$RIG_ENV_ALLOW`."""
    listed = subprocess.run(
        ["npm", "config", "ls", "--json"],
        cwd=project,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        config = json.loads(listed.stdout)
    except ValueError:
        said = listed.stderr.strip()[-200:]
        raise EnvError(
            f"`npm config ls --json` failed in {project} ({said}); fix npm's configuration"
        ) from None
    urls = [value for key, value in config.items() if key.endswith(":registry")]
    urls.append(config.get("registry") or NPM_REGISTRY)
    if spec.manager == "yarn":
        urls += yarn_urls(environ, project, node_lock(spec, project))
    found = []
    for url in urls:
        endpoint = endpoint_of(url) if isinstance(url, str) else None
        if endpoint is not None:
            found.append(f"{endpoint[0]}:{endpoint[1]}")
    found += _allowed(environ)
    return list(dict.fromkeys(found))


def yarn_urls(environ: dict[str, str], project: Path, lock: Path) -> list[str]:
    """The registries yarn's configuration names for `project`, 2+ (`npmRegistryServer` and each of
    `npmScopes`' in its .yarnrc.yml and the user's, YARN_NPM_REGISTRY_SERVER) and 1 (`registry` and
    `@scope:registry` in its .yarnrc and the user's, YARN_REGISTRY; npm's it reads too), default
    registry.yarnpkg.com; and the URLs the lockfile pins (yarn 1 fetches each package from its
    `resolved` URL). EnvError in one line for a .yarnrc.yml that is not YAML."""
    home = Path(environ.get("HOME") or Path.home())
    servers = [environ.get("YARN_NPM_REGISTRY_SERVER"), environ.get("YARN_REGISTRY")]
    scoped: list[object] = []
    for rc in (project / ".yarnrc.yml", home / ".yarnrc.yml"):
        try:
            config = yaml.safe_load(rc.read_text(encoding="utf-8"))
        except OSError:
            continue
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise EnvError(f"{rc} is not valid YAML ({first}); fix the file") from None
        config = config if isinstance(config, dict) else {}
        servers.append(config.get("npmRegistryServer"))
        scopes = config.get("npmScopes")
        for scope in scopes.values() if isinstance(scopes, dict) else []:
            scoped.append(scope.get("npmRegistryServer") if isinstance(scope, dict) else None)
    for rc in (project / ".yarnrc", home / ".yarnrc"):
        try:
            lines = rc.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            if len(words) == 2 and words[0] == "registry":
                servers.append(words[1])
            elif len(words) == 2 and words[0].endswith(":registry"):
                scoped.append(words[1])
    named = [url for url in [*servers, *scoped] if isinstance(url, str) and url]
    if not any(isinstance(url, str) and url for url in servers):
        named.append(YARN_REGISTRY)
    return named + _LOCKED_URL.findall(lock.read_text(encoding="utf-8", errors="replace"))


def _allowed(environ: dict[str, str]) -> list[str]:
    found = []
    for entry in filter(None, (e.strip() for e in environ.get(ALLOW_VAR, "").split(","))):
        try:
            host, port = parse_host_port(entry)
        except ValueError as exc:
            raise EnvError(f"${ALLOW_VAR}: {exc}") from None
        found.append(f"{host}:{port}")
    return found


@contextmanager
def build_network(
    environ: dict[str, str], log: Path, allowed: list[str] | None = None
) -> Iterator[Egress | None]:
    """The egress of one build, to `allowed` host:port (default: the Python indexes of
    `environ`); None: the machine's network, said in `log`. Its attempts are written to
    `<log>.network.jsonl` when the build ends."""
    allowed = index_endpoints(environ) if allowed is None else allowed
    plan, status = resolve_network("allowlist", allowed, sandboxed=False, required=False)
    with log.open("a", encoding="utf-8") as out:
        out.write(f"network: {status.detail}; allowed: {', '.join(allowed)}\n")
    if plan is None:
        yield None
        return
    egress = Egress(plan, None)
    with egress:
        try:
            yield egress
        finally:
            egress.stop()
            network_log = log.with_suffix(".network.jsonl")
            network_log.unlink(missing_ok=True)
            network_log.write_text("".join(f"{line}\n" for line in egress.lines), encoding="utf-8")
