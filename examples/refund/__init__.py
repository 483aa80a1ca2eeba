"""Refunds leased to workers, their retry and lease policy built from lifecycles.machines.blocks."""
