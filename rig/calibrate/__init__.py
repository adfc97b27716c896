"""Calibration: the oracle proves a pack's tasks (oracle), the mock model proves each harness (harness)."""
