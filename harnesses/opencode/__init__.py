"""OpenCode: its adapter, session parser and transcript."""
