"""A short soak in the default test run (issue #41): two minutes, seed 7, then the same journal audit as
``make soak`` (``tests.soak.__main__``): every rollout settled or Halted, every live pod's spec and status
equal to its last settled entry, every pod's generation equal to 1 + the resizes the journal says were sent.

Kept short for CI (the whole suite on 2 cores): 150 pods, 2 minutes of faults, up to 2 minutes to settle, on
its own private cluster. The 5-minute soak over many seeds is ``make soak SEEDS=N``.
"""

from __future__ import annotations

import pytest

from tests.soak.__main__ import soak

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]


def test_a_two_minute_soak_passes_its_journal_audit() -> None:
    summary = soak(minutes=2, pods=150, seed=7)
    counts = summary["counts"]
    assert summary["audit"] == "passed" and summary["audit_problems"] == 0, summary
    # Not a vacuous pass: the updater resized pods, faults were injected, and the audit looked at pods.
    assert counts.get("resizes", 0) > 0 and summary["pods_audited"] > 0, summary
    assert sum(n for k, n in counts.items() if k.startswith("fault_")) >= 3, summary
