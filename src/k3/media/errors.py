"""The one error bad image input raises: a ValueError whose message names the problem and the fix, which
the server turns into a 400 (never a 500)."""


class ImageError(ValueError):
    pass
