"""The package version (read by setuptools from this file without importing the package)."""

__version__ = "0.1.0"
