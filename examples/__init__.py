"""Examples built only from the public API of lifecycles (see docs/extending.md)."""
