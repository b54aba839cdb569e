class Inventory:
    def __init__(self):
        self._stock = {}

    def add(self, item, n=1):
        self._stock[item] = self._stock.get(item, 0) + n

    def remove(self, item, n=1):
        have = self._stock.get(item, 0)
        if n > have:
            raise ValueError(f"only {have} of {item!r} in stock")
        self._stock[item] = have - n

    def count(self, item):
        return self._stock.get(item, 0)
