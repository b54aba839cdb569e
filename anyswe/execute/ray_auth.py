"""Which Ray authentication mode the driver joins a cluster with, decided before ``ray.init``.

Ray (2.60, the pinned extra) runs a cluster either with token authentication or without: ``ray start
--head`` turns it on when ``RAY_AUTH_MODE=token`` or, with the variable unset, when a token exists
(``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` names, or ``~/.ray/auth_token``), and leaves it
off otherwise. A driver that joins an address never turns it on by itself (``ray.init`` reads only
``RAY_AUTH_MODE``). The mismatches end badly: a driver in token mode with no token aborts in Ray's C++
(``Check failed: has_token || ignore_auth_mode``, "you have likely discovered a bug in Ray") with no
Python error at all; a driver without token mode at a token cluster fails with a long RPC error.

Nothing the head writes says its mode (the session dir holds no such file, and the head may be another
host), so the cluster is asked: a short child process connects to its GCS without a token and, if
refused, with this machine's token. A child because the mode is process-wide Ray configuration and a
wrong guess can abort the whole process in C++; the child's abort is a message here instead. The
probe tells: the cluster needs no token, needs one (and ours is or is not accepted), or does not
answer. From that and what the user set, :func:`choose_auth_mode` picks the mode or raises a
:class:`RuntimeNotAvailable` saying what to change. The token itself is never read here, printed,
logged or put on a command line: Ray loads it from its usual places in the child and in the driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from anyswe.errors import RuntimeNotAvailable

#: The variable Ray takes the mode from ("token" or "disabled"; unset is "disabled" for a driver).
AUTH_MODE_VAR = "RAY_AUTH_MODE"
#: The line the probe child answers on (Ray may write its own lines around it).
_MARK = "anyswe-ray-probe:"
#: Bounds the child: its Ray import takes seconds, and a GCS that does not answer takes Ray ~50 s to give up.
PROBE_TIMEOUT = 180.0

_WHERE_TOKEN = (
    "put the cluster's token (`ray get-auth-token` on its head) in ~/.ray/auth_token on this machine, "
    "or in a file named by RAY_AUTH_TOKEN_PATH, or in RAY_AUTH_TOKEN"
)


def probe_target(address: str | None) -> str | None:
    """The GCS address ``ray.init(address)`` would join, or None when it would start a Ray of its own
    (nothing to ask: Ray then chooses the mode itself) or go through Ray Client (``ray://``)."""
    if (address or os.environ.get("RAY_ADDRESS", "")).startswith("ray://"):
        return None
    from ray._private.services import canonicalize_bootstrap_address

    try:
        target: str | None = canonicalize_bootstrap_address(address)  # type: ignore[arg-type]  # None is documented
    except Exception:  # a malformed address: ray.init says what is wrong with it
        return None
    return target


def probe(target: str) -> dict[str, Any]:
    """Ask the cluster at ``target`` (host:port of its GCS) in a child process what it accepts.

    Returns ``has_token`` (Ray finds a token on this machine), ``without_token`` and, when that was
    refused and a token exists, ``with_token``: each "ok", "refused" or "unreachable: <why>"."""
    env = {k: v for k, v in os.environ.items() if k != AUTH_MODE_VAR}  # the child sets the mode per attempt
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        r = subprocess.run(
            [sys.executable, "-m", "anyswe.execute.ray_auth", target],
            env=env,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeNotAvailable(
            f"the Ray cluster at {target} did not answer within {PROBE_TIMEOUT:.0f} s: is its head running, "
            "and is this its GCS address (the --port of `ray start --head`)?"
        ) from None
    for line in r.stdout.splitlines():
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK) :])  # type: ignore[no-any-return]
    # The child died before answering: Ray's fatal checks say why on a line of their own (never the token).
    why = [ln.split("] ", 1)[-1] for ln in r.stderr.splitlines() if "Check failed" in ln or "Error" in ln]
    raise RuntimeNotAvailable(
        f"asking the Ray cluster at {target} for its authentication mode failed (exit code {r.returncode})"
        + (f": {why[-1][:600]}" if why else "")
    )


def choose_auth_mode(target: str, answer: dict[str, Any], requested: str | None) -> str:
    """The mode to join ``target`` with, from the probe's ``answer`` and the user's ``RAY_AUTH_MODE``
    (``requested``, None when unset); a :class:`RuntimeNotAvailable` naming the fix when none can work."""
    requested = requested.strip().lower() or None if requested is not None else None  # "" is unset
    if requested not in (None, "token", "disabled"):
        raise RuntimeNotAvailable(
            f"{AUTH_MODE_VAR}={requested!r} is not a Ray authentication mode: use token or disabled (or unset it)"
        )
    open_to_all, has_token = answer.get("without_token"), bool(answer.get("has_token"))
    if open_to_all == "ok":  # no token authentication on the cluster
        if requested == "token" and not has_token:
            # The C++ abort above: token mode and no token. Ray would not need one here.
            raise RuntimeNotAvailable(
                f"{AUTH_MODE_VAR}=token, but this machine has no Ray token and the cluster at {target} does not "
                f"use token authentication: unset {AUTH_MODE_VAR} (or set it to disabled)"
            )
        # A token sent to a cluster without authentication is ignored: what the user asked for works.
        return "token" if requested == "token" else "disabled"
    if open_to_all != "refused":
        raise RuntimeNotAvailable(
            f"cannot reach the Ray cluster at {target} ({open_to_all}): is its head running, and is this its "
            "GCS address (the --port of `ray start --head`)?"
        )
    if requested == "disabled":
        raise RuntimeNotAvailable(
            f"the Ray cluster at {target} uses token authentication, but {AUTH_MODE_VAR}=disabled: unset "
            f"{AUTH_MODE_VAR} (or set it to token) and {_WHERE_TOKEN}"
        )
    if not has_token:
        raise RuntimeNotAvailable(
            f"the Ray cluster at {target} uses token authentication and this machine has no token: {_WHERE_TOKEN}"
        )
    if answer.get("with_token") != "ok":
        raise RuntimeNotAvailable(
            f"the Ray cluster at {target} refuses this machine's Ray token ({answer.get('with_token')}): it is "
            f"not the cluster's; {_WHERE_TOKEN}"
        )
    return "token"


def use_auth_mode(mode: str) -> None:
    """Make ``mode`` this process's Ray authentication mode before ``ray.init``.

    Ray reads its configuration when it is imported; the mode set in the environment afterwards reaches
    some of its C++ parts and not others (that split is what aborted the driver), so the configuration
    is read again, as Ray does itself when ``ray.init`` turns token mode on for a cluster it starts."""
    os.environ[AUTH_MODE_VAR] = mode
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _attempt(target: str) -> str:
    from ray._raylet import GcsClient  # type: ignore[attr-defined]
    from ray.exceptions import AuthenticationError

    try:
        GcsClient(address=target).internal_kv_get(b"anyswe-auth-probe", None, timeout=10)
    except AuthenticationError:
        return "refused"
    except Exception as exc:  # not answering, or not a GCS
        return f"unreachable: {type(exc).__name__}: {str(exc)[:300]}"
    return "ok"


def _child(target: str) -> dict[str, Any]:
    os.environ[AUTH_MODE_VAR] = "disabled"  # before Ray is imported: the first attempt sends no token
    from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]

    answer: dict[str, Any] = {"has_token": AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True)}
    answer["without_token"] = _attempt(target)
    if answer["without_token"] == "refused" and answer["has_token"]:
        use_auth_mode("token")
        answer["with_token"] = _attempt(target)
    return answer


if __name__ == "__main__":
    print(_MARK + json.dumps(_child(sys.argv[1])), flush=True)
