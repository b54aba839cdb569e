import time

from retry import retry


def test_success_first_time():
    assert retry(lambda: 42) == 42


def test_slow_backoff_integration():
    # A deliberately slow test: the suite takes about ten seconds.
    start = time.monotonic()
    assert retry(lambda: "ok", delay=5.0) == "ok"
    time.sleep(10)
    assert time.monotonic() - start >= 10
