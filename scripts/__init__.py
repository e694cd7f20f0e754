"""The repository's scripts (docs/development.md lists each one and who runs it).

A package only so that the entry points (files without a suffix, run by name) and the tests
can import the code they share from ``scripts.lib``.
"""
