"""Gemini CLI: its adapter, session parser and transcript."""
