import time


def retry(fn, attempts=3, delay=0.0):
    try:
        return fn()
    except Exception:
        time.sleep(delay)
        raise
