from slug.normalize import normalize


def slugify(text):
    return "-".join(normalize(text).split())
