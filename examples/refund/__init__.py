"""Refunds leased to workers, their retry and lease policy made of lifecycles' building blocks."""
