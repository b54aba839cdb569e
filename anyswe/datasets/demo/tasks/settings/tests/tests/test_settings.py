from settings import load


def test_explicit_values():
    assert load({"retries": 1, "timeout": 2}) == {"retries": 1, "timeout": 2}


def test_defaults_fill_missing_keys():
    assert load({}) == {"retries": 3, "timeout": 30}
