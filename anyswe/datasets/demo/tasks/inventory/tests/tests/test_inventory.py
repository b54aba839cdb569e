import pytest

from inventory import Inventory


def test_add_and_remove():
    inv = Inventory()
    inv.add("apple", 3)
    inv.remove("apple", 2)
    assert inv.count("apple") == 1


def test_count_unknown_is_zero():
    assert Inventory().count("pear") == 0


def test_remove_too_many_raises():
    inv = Inventory()
    inv.add("apple", 1)
    with pytest.raises(ValueError):
        inv.remove("apple", 2)
    assert inv.count("apple") == 1
