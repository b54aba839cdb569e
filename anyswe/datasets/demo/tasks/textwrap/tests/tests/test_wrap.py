import pytest

from wrap import shorten


def test_short_text_unchanged():
    assert shorten("abc", 5) == "abc"


def test_shorten_counts_ellipsis():
    assert shorten("abcdefghij", 8) == "abcde..."
    assert len(shorten("abcdefghij", 8)) == 8


@pytest.mark.skip(reason="unicode widths are not supported yet")
def test_wide_characters():
    assert shorten("\u4e16\u754c", 1) == "\u4e16"
