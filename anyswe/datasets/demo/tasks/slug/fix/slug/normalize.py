def normalize(text):
    """Strip surrounding white space and fold case."""
    return text.strip().lower()
