"""The `lifecycles` command: one subcommand module per capability.

Each module in ``COMMAND_MODULES`` exposes ``register(subparsers)``, which adds its
parser and sets ``handler`` to a function ``(args) -> exit code``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES: tuple[str, ...] = (
    "lifecycles.cli_monitor",
    "lifecycles.checker",
    "lifecycles.diagrams",
    "lifecycles.cli_outbox",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lifecycles",
        description="Explicit, durable state machines: check, draw and operate lifecycles.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
