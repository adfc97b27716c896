"""Claude Code: its adapter, session parser and transcript."""
