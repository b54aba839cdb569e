from leap import is_leap


def test_ordinary_leap_year():
    assert is_leap(2024)


def test_common_year():
    assert not is_leap(2023)


def test_divisible_by_400():
    assert is_leap(2000)
