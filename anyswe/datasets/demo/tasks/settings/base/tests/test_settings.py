from settings import load


def test_explicit_values():
    assert load({"retries": 1, "timeout": 2}) == {"retries": 1, "timeout": 2}
