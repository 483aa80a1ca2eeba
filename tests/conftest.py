"""Shared test settings: the PostgreSQL switch.

The Hypothesis profiles (``ci``, the default, and ``deep``: ``HYPOTHESIS_PROFILE=deep
pytest``) come from the lifecycles pytest plugin, as in any project that installs
lifecycles; see :mod:`lifecycles.testing`.
"""

from __future__ import annotations

POSTGRES_DSN_VARIABLE = "LIFECYCLES_TEST_POSTGRES_DSN"
