"""`lifecycles explain`: written in :mod:`lifecycles._cli_ops`, registered from here so
that each command has its own module (a module that does not import stands in for its
command alone, see :mod:`lifecycles.cli`)."""

from lifecycles._cli_ops import register_explain as register

__all__ = ["register"]
