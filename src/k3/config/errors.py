"""The one error a config raises (model.py and vision.py both check theirs), apart from either, so neither
imports the other for it."""


class ConfigError(ValueError):
    """An inconsistent or unsupported config; the message names the key and the fix."""
