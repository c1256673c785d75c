"""Shared test set-up: offscreen Qt, a fixed hypothesis profile, seeded randomness."""

import os

from hypothesis import HealthCheck, settings

# Qt renders offscreen in every test run; no display or system packages needed.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# One fixed, derandomized profile so the suite never flakes and stays fast.
settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=60,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
