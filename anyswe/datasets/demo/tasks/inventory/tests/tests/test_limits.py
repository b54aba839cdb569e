import pytest

from inventory import Inventory


def test_stock_never_negative():
    inv = Inventory()
    with pytest.raises(ValueError):
        inv.remove("pear")
    assert inv.count("pear") == 0
