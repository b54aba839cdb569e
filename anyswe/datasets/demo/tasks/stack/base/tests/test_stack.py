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
