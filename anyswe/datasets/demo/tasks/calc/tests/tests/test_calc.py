import pytest

from calc import add, mul, sub


@pytest.mark.parametrize(("a", "b", "expected"), [(1, 2, 3), (-1, 1, 0), (0, 0, 0)])
def test_add(a, b, expected):
    assert add(a, b) == expected


def test_sub():
    assert sub(5, 3) == 2


def test_mul():
    assert mul(4, 3) == 12
