from slug.core import slugify

__all__ = ["slugify"]
