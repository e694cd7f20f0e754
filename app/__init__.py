"""zapverify: batch signature verification on GPU or CPU."""

__version__ = "0.1.0"
