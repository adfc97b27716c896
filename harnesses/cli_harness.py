"""The base class of the adapters of npm-installed CLIs: what every one of them shares.

`CliHarness` holds the settings an adapter is made with, the pinned CLI and its version, the
provider branch (a mock model server for this run, or the real provider behind the key gateway),
the explicit environment with the placeholder of the provider's key, and the thinking level a run
asks for. This module also installs skills (one reading of a SKILL.md's `name:`) and rounds costs.
A subclass keeps only what is its own: the command line, config files, session location, parser,
failure signature and tool names.
"""

import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from harnesses import versions
from harnesses.cli import (
    MOCK_KEY,
    api_key,
    base_env,
    cli_version,
    holds_key,
    installs_on_first_use,
    locate_cli,
)
from harnesses.factors import extension_path
from harnesses.mock_model.server import WireProtocol
from harnesses.mock_model.session import mock_model
from harnesses.protocol import CliNotFound, HarnessBase
from rig.confine.agent import Confinement, run_agent_process
from rig.confine.keygate import PLACEHOLDER, KeyGate
from rig.paths import local
from rig.schema import AgentRun, Condition, Provider, Task

# Summing many small float costs leaves noise in the last digits; a record should not carry it.
COST_DIGITS = 9
_NAME_LINE = re.compile(r"^name:\s*(.+?)\s*$")


class CliHarness(HarnessBase):
    """A HarnessAdapter for an npm CLI pinned in harnesses/node; subclasses fill in the CLI's own parts.

    Class attributes besides those of HarnessBase: `package` (its npm package), `binary` and
    `bin_env` (the CLI's executable and the variable that may point at another copy), `mock_key_env`
    (the variable the CLI reads the mock's key from) and `mock_url_suffix` (what the CLI expects
    after the mock server's root URL). Every such CLI is calibrated, speaks a `mock_protocol` and
    installs other versions of its package.
    """

    package: ClassVar[str]
    binary: ClassVar[str]
    bin_env: ClassVar[str]
    calibrated: ClassVar[bool] = True  # rig calibrate --harness drives it with the mock model
    mock_protocol: ClassVar[WireProtocol]
    mock_key_env: ClassVar[str]
    mock_url_suffix: ClassVar[str] = ""
    installs_versions: ClassVar[bool] = True

    def __init__(
        self,
        task: Task,
        provider: Provider,
        model: str | None,
        thinking: str | None,
        stall_s: float,
        confinement: Confinement | None = None,
        harness_version: str | None = None,
    ) -> None:
        self.task = task
        self.provider = provider
        self.model = model
        self.thinking = thinking
        self.stall_s = stall_s
        self.confinement = confinement
        # Another version than the pinned one, installed by `install_version` before the run.
        self.harness_version = harness_version
        self.check_settings()
        if provider.kind == "real" and self.endpoint() is None:
            raise ValueError(
                f"{self.name} knows no endpoint for provider {provider.name!r}; set provider.base_url "
                "(the rig forwards the CLI's requests there, holding the key outside the agent's sandbox)"
            )

    def check_settings(self) -> None:
        """Refuse settings the CLI cannot run with (ValueError), before any run starts; none by default."""

    @classmethod
    def install_version(cls, version: str, notify: Callable[[str], None] | None = None) -> Path:
        """Install `version` of the CLI's package into the rig's cache unless it is there; return the
        folder it is installed in (the agent's sandbox must see it)."""
        versions.install(cls.package, version, cls.binary, notify)
        return versions.install_dir(cls.package, version)

    @classmethod
    def install_cli(cls, force: bool = False, notify: Callable[[str], None] | None = None) -> Path:
        """Install the pinned version of the CLI (harnesses/node/package-lock.json's) into the rig's
        cache unless it is there, or again with `force`; return its executable."""
        version = versions.pinned_version(cls.package)
        if version is None:
            raise CliNotFound(
                f"{versions.PINNED_LOCK} pins no {cls.package}; add it there (`npm install` in its folder)"
            )
        return versions.install(cls.package, version, cls.binary, notify, force)

    @classmethod
    def locate_cli(cls) -> tuple[str, Path]:
        """Where the CLI a run uses is: "$<bin_env>", "checkout", "cache" or "PATH", and its path
        (harnesses.cli.locate_cli); CliNotFound when it is nowhere."""
        return locate_cli(cls.binary, cls.bin_env, cls.package, cls.name)

    def cli(self) -> Path:
        """The CLI executable that runs: the installed `harness_version` if one was asked for, else
        where `locate_cli` finds it, else the pinned version installed now into the cache where
        `installs_on_first_use` says so."""
        if self.harness_version:
            return versions.installed_cli(self.package, self.harness_version, self.binary)
        try:
            return self.locate_cli()[1]
        except CliNotFound:
            if not installs_on_first_use():
                raise
        return self.install_cli(notify=lambda message: print(message, file=sys.stderr, flush=True))

    def version(self) -> str:
        """The `--version` of the CLI that runs."""
        return cli_version(self.cli())

    def thinking_level(self, condition: Condition) -> str | None:
        """The thinking level of a run: the condition's, else the experiment's."""
        return condition.thinking or self.thinking

    def key_env(self) -> str:
        """The variable that carries the provider's key to the CLI."""
        return self.mock_key_env if self.provider.kind == "mock" else str(self.provider.api_key_env)

    def environment(self, home: Path, extra: dict[str, str]) -> dict[str, str]:
        """The CLI's whole environment: `cli.base_env` with HOME `home`, its key variable, and
        `extra`. The key variable holds the placeholder whenever the rig holds the key (the key
        gateway puts the real one in), the mock's own key otherwise."""
        return base_env(
            home, {self.key_env(): PLACEHOLDER if holds_key(self.provider) else MOCK_KEY, **extra}
        )

    def default_base_url(self) -> str | None:
        """The base URL the CLI calls for a real provider without `base_url` (its own default for
        `provider.name`), None if it has none the rig knows: that provider then needs a base_url,
        or the rig could not keep its key outside the sandbox."""
        return None

    def endpoint(self) -> str | None:
        """The base URL of the real provider's model: `provider.base_url`, else the CLI's default."""
        return self.provider.base_url or self.default_base_url()

    def run_process(
        self,
        command: list[str],
        workdir: Path,
        condition: Condition,
        run_dir: Path,
        timeout: int,
        watched: Path | None,
        connect: Callable[[str | None], dict[str, str]],
    ) -> AgentRun:
        """Run `command` against the provider, through `rig.confine.agent.run_agent_process`.

        A mock provider gets a mock model server for this run. A provider whose key the rig holds
        (every real one; the mock with `api_key_env`) is reached through this run's key gateway
        (rig.confine.keygate), which adds the key the CLI only has a placeholder of. `connect`
        points the CLI at its base URL (the gateway's, or the mock's, with `mock_url_suffix` for the
        mock) by writing its config, and returns the process's environment. `watched` is the
        session file or directory the silence watchdog watches besides the streams (and, with the
        adapter's `session_usage`, the run budget reads). The base URL is
        the one endpoint a confined network lets the agent reach besides the policy's (rig.confine.network).
        """

        def run(env: dict[str, str], url: str | None) -> AgentRun:
            return run_agent_process(
                command,
                workdir,
                env,
                run_dir,
                timeout,
                self.stall_s,
                watched,
                self.confinement,
                url,
                type(self).live_usage,
                self.model,
                type(self).final_event,
                type(self).session_usage,
                type(self).failed_request,
            )

        if self.provider.kind == "mock":
            key = api_key(self.provider) if holds_key(self.provider) else None
            options = condition.harness_options
            with mock_model(self.task, options, run_dir, self.mock_protocol, key) as base_url:
                if key is None:
                    return run(connect(f"{base_url}{self.mock_url_suffix}"), base_url)
                with KeyGate(base_url, key) as gate:
                    return run(connect(f"{gate.url}{self.mock_url_suffix}"), gate.url)
        with KeyGate(str(self.endpoint()), api_key(self.provider)) as gate:
            return run(connect(gate.url), gate.url)


def install_skill(skill: str, skills_root: Path) -> Path:
    """Copy a skill directory (as a design stores it: `rig.paths.local`) to `skills_root/<name>`.

    The copy is named after the skill's `name:` (the directory's name if it has none), as the CLIs
    expect; a copy left there earlier is replaced.
    """
    source = local(skill)
    skill_md = source / "SKILL.md"
    if not skill_md.is_file():
        raise ValueError(f"skill {skill!r} has no SKILL.md ({skill_md} is missing)")
    name = skill_name(skill_md.read_text(encoding="utf-8")) or source.name
    if name.startswith(".") or "/" in name:
        raise ValueError(f"skill {skill!r} has an unusable name {name!r}")
    target = skills_root / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    return target


def install_extension(extension: str, root: Path) -> Path:
    """Copy an extension file (as a design stores it: `rig.paths.local`) into `root`, under
    its own name, so the agent never reads the rig's repository; the copy's path."""
    source = extension_path(extension)
    if not source.is_file():
        raise ValueError(f"extension {extension!r} is no file ({source})")
    root.mkdir(parents=True, exist_ok=True)
    target = root / source.name
    shutil.copyfile(source, target)
    return target


def skill_name(text: str) -> str | None:
    """The `name:` of a SKILL.md's YAML front matter (between the leading `---` lines), if any."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    for line in lines[1:]:
        if line.strip() == "---":
            return None
        match = _NAME_LINE.match(line)
        if match:
            return match.group(1).strip("'\"") or None
    return None


def round_cost(cost: float) -> float:
    """A cost in USD without the float noise of summing many small costs."""
    return round(cost, COST_DIGITS)
