import time


def retry(fn, attempts=3, delay=0.0):
    for attempt in range(attempts):
        try:
            return fn()
        except Exception:
            if attempt == attempts - 1:
                raise
            time.sleep(delay)
    raise ValueError("attempts must be positive")
