"""Pi (pi-coding-agent): its adapter, session parser and transcript."""
