"""Harness adapters: one module per agent CLI, behind the HarnessAdapter protocol."""
