from slug import slugify


def test_simple():
    assert slugify("abc") == "abc"
