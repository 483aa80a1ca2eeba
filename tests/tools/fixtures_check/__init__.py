"""Modules `lifecycles check --module` loads in tests/tools/test_checker.py and
tests/tools/test_check_cli.py: small lifecycles, some broken on purpose. Not collected by pytest."""
