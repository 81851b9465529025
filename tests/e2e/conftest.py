"""The lab suites' CPU line is printed by tests/conftest.py (head and tail of every run)."""
