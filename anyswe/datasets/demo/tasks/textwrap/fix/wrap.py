def shorten(text, width):
    if len(text) <= width:
        return text
    return text[: max(width - 3, 0)] + "..."
