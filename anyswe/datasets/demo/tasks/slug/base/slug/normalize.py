def normalize(text):
    """Strip surrounding white space."""
    return text.strip()
