"""Shared test settings: Hypothesis profiles and the PostgreSQL switch.

Profiles: ``ci`` (default; bounded so `.ci/run` stays well under its time budget, and
derandomized so a CI run is reproducible and the transition-coverage gate cannot flake)
and ``deep`` (random, far longer, for runs by hand: ``HYPOTHESIS_PROFILE=deep pytest``).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
    derandomize=True,
)
settings.register_profile(
    "deep",
    max_examples=2000,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

POSTGRES_DSN_VARIABLE = "LIFECYCLES_TEST_POSTGRES_DSN"
