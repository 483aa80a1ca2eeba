"""A third lifecycle, document review, built only from the public API (docs/extending.md)."""
