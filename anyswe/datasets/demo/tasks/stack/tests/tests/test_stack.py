from stack import Stack


def test_len():
    s = Stack()
    s.push(1)
    s.push(2)
    assert len(s) == 2


def test_push_then_peek():
    s = Stack()
    s.push("a")
    assert s.peek() == "a"


def test_pop_is_lifo():
    s = Stack()
    s.push(1)
    s.push(2)
    assert s.pop() == 2


def test_peek_empty_is_none():
    assert Stack().peek() is None
