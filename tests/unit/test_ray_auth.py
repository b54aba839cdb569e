"""choose_auth_mode: what the cluster's answer and the user's RAY_AUTH_MODE make of the driver's mode.

The answers are the probe's own shapes (tests/e2e/test_ray.py gets them from real heads); here every
combination, including those the e2e tests do not start a head for."""

from __future__ import annotations

import pytest

from anyswe.errors import RuntimeNotAvailable
from anyswe.execute.ray_auth import choose_auth_mode

OPEN = {"has_token": False, "without_token": "ok"}
OPEN_TOKEN_HERE = {"has_token": True, "without_token": "ok"}
TOKEN_NONE_HERE = {"has_token": False, "without_token": "refused"}
TOKEN_OURS = {"has_token": True, "without_token": "refused", "with_token": "ok"}
TOKEN_WRONG = {"has_token": True, "without_token": "refused", "with_token": "refused"}
DOWN = {"has_token": True, "without_token": "unreachable: RpcError: Timed out while waiting for GCS"}


@pytest.mark.parametrize(
    ("answer", "requested", "mode"),
    [
        (OPEN, None, "disabled"),
        (OPEN, "", "disabled"),  # set but empty: unset
        (OPEN, "disabled", "disabled"),
        (OPEN_TOKEN_HERE, None, "disabled"),
        (OPEN_TOKEN_HERE, "Token", "token"),  # what the user asked for works there: kept
        (TOKEN_OURS, None, "token"),
        (TOKEN_OURS, "token", "token"),
    ],
)
def test_the_mode_that_joins(answer: dict[str, object], requested: str | None, mode: str) -> None:
    assert choose_auth_mode("h:1", answer, requested) == mode


@pytest.mark.parametrize(
    ("answer", "requested", "fix"),
    [
        (OPEN, "token", "unset RAY_AUTH_MODE"),  # Ray's C++ abort: token mode, no token
        (TOKEN_NONE_HERE, None, "~/.ray/auth_token"),
        (TOKEN_OURS, "disabled", "unset RAY_AUTH_MODE (or set it to token)"),
        (TOKEN_WRONG, None, "refuses this machine's Ray token"),
        (DOWN, None, "is its head running"),
        (OPEN, "tokens", "use token or disabled"),
    ],
)
def test_no_mode_joins_and_the_error_names_the_fix(answer: dict[str, object], requested: str | None, fix: str) -> None:
    with pytest.raises(RuntimeNotAvailable, match=r"h:1|RAY_AUTH_MODE") as info:
        choose_auth_mode("h:1", answer, requested)
    assert fix in str(info.value)
