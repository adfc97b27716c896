"""After the agent: the gate and the hidden tests, the audit, and the infrastructure classification."""
