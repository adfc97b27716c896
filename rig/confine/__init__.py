"""What confines an agent and bounds what the rig reads of it.

Bounded subprocesses and process containment (proc), the sandbox (sandbox), the network namespace
and its egress relay (network, netrelay), the gateway that holds the provider's key outside the
sandbox (keygate), bounded streams and file reads (streams, untrusted), the
run budget (run_budget) and the agent-process supervisor (agent).
"""
