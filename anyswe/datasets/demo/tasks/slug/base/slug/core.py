from slug.normalize import normalize


def slugify(text):
    return normalize(text).replace(" ", "-")
