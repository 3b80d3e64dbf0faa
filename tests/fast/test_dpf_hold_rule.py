"""The simulated DPF reads the hold annotation as DPF's `reconcileHold` does (DOMAIN.md 2.4).

DPF `internal/provisioning/controllers/dpunodemaintenance/dpunodemaintenance_controller.go`
`reconcileHold` (@1f7af1ed, index id 57664575831): an absent annotation is written back "true"
(the hold re-armed, not released); the value goes through Go's `strconv.ParseBool`, so every
false spelling releases and every true spelling holds; a value that is no boolean is an error
(`NodeEffectApplied=False`, reason `Error`), not a release.
"""

from __future__ import annotations

import pytest

from simulators.dpf.provisioning import hold_verdict


def test_an_absent_annotation_re_arms_the_hold() -> None:
    assert hold_verdict(None) == "arm"


@pytest.mark.parametrize("value", ["false", "0", "f", "F", "FALSE", "False"])
def test_every_go_false_spelling_releases(value: str) -> None:
    assert hold_verdict(value) == "release"


@pytest.mark.parametrize("value", ["true", "1", "t", "T", "TRUE", "True"])
def test_every_go_true_spelling_holds(value: str) -> None:
    assert hold_verdict(value) == "hold"


@pytest.mark.parametrize("value", ["", "no", "yes", "released", " false"])
def test_a_value_that_is_no_boolean_is_an_error_not_a_release(value: str) -> None:
    assert hold_verdict(value) == "error"
