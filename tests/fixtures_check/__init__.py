"""Modules `lifecycles check --module` loads in tests/test_checker.py and
tests/test_check_cli.py: small lifecycles, some broken on purpose. Not collected by pytest."""
