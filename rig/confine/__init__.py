"""What confines an agent and bounds what the rig reads of it.

Bounded subprocesses and process containment (proc), the sandbox (sandbox), the network namespace
and its egress relay (network, netrelay), bounded streams and file reads (streams, untrusted), the
run budget (run_budget) and the agent-process supervisor (agent).
"""
