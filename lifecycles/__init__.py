"""lifecycles: explicit, durable state machines declared as transition tables."""

__version__ = "0.1.0"
