"""What an upstream says when it will not give a reply: the gateway answers in the protocol's error shape."""

from __future__ import annotations


class UpstreamError(Exception):
    """This call fails (a rate limit, a server error, a too-long prompt); the next may not.

    ``kind`` is the protocol's error type (``rate_limit_error``, ``api_error``, ...), ``code`` the
    OpenAI error code where it matters (``context_length_exceeded``), ``retry_after`` seconds.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "api_error",
        code: str | None = None,
        retry_after: float | None = None,
        unreachable: bool = False,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.code, self.retry_after = status, kind, code, retry_after
        #: No connection to the upstream could be made at all (after the gateway's own retries): unlike a
        #: rate limit or an overloaded server, nothing says the next call will fare better.
        self.unreachable = unreachable


class UpstreamRefused(Exception):
    """An upstream that will not answer this task any more (the message says why): the task's error."""
