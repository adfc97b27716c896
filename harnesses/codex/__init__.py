"""Codex CLI: its adapter, session parser and transcript."""
