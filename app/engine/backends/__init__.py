"""Verification backends: each implements :class:`app.engine.backends.base.Backend`."""
