"""The in-process verification engine (no web stack imported here)."""
