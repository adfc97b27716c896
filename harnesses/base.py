"""Kept for plug-ins written against the earlier layout, for one release: the protocol is now
harnesses.protocol, the agent-process supervisor rig.confine.agent."""

from harnesses.protocol import HarnessAdapter, HarnessBase
from rig.confine.agent import Confinement, kill_running_agents, run_agent_process

__all__ = ["Confinement", "HarnessAdapter", "HarnessBase", "kill_running_agents", "run_agent_process"]
