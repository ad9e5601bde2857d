"""The package version (read statically by setuptools at build time, and cheap to import)."""

__version__ = "0.1.0"
