from slug import slugify


def test_simple():
    assert slugify("abc") == "abc"


def test_lowercase():
    assert slugify("Hello") == "hello"


def test_collapses_spaces():
    assert slugify("Hello  World") == "hello-world"
