"""The `lifecycles` command: one subcommand module per capability.

Each module in ``COMMAND_MODULES`` exposes ``register(subparsers)``, which adds its
parser and sets ``handler`` to a function ``(args) -> exit code``.

Every error is one line on stderr saying what is wrong and what to do (with ``--json``
also ``{"error": CODE, "message": ...}`` on stdout), never a traceback: a handler raises
:class:`CommandError` with its exit code; a usage error exits 2; anything unexpected
exits 70 (``LIFECYCLES_TRACEBACK=1`` prints the traceback too).

A command module that does not import leaves the other commands working. Its own
command then exits 2 (``definition_invalid``, at the ``file:line`` of the declaration)
when a lifecycle it imports has an invalid declaration, and 70 for anything else.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NoReturn

COMMAND_MODULES: dict[str, str] = {
    "lifecycles.monitor.cli": "monitor",
    "lifecycles._checker": "check",
    "lifecycles.diagrams": "diagrams",
    "lifecycles.outbox.cli": "outbox",
    "lifecycles._cli_worker": "worker",
    "lifecycles._cli_ops": "list",
    "lifecycles._cli_ops_status": "status",
    "lifecycles._cli_ops_health": "health",
    "lifecycles._cli_ops_explain": "explain",
}
"""Each command module, and the command its ``register`` adds."""

# The command line in-process: argv in, exit code out.
__all__ = ["main"]

EXIT_USAGE = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in lifecycles, not in the caller's input
TRACEBACK_VARIABLE = "LIFECYCLES_TRACEBACK"


class CommandError(Exception):
    """A command cannot answer: its exit code, a stable error code and a one-line message."""

    def __init__(self, exit_code: int, error: str, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.error = error
        self.message = message


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (and JSON under ``--json``)."""

    def error(self, message: str) -> NoReturn:
        # report() prefixes "lifecycles: "; the subcommand follows it once, not the whole
        # prog again (`lifecycles: monitor status: ...`, not `lifecycles: lifecycles ...`).
        command = self.prog.removeprefix("lifecycles").strip()
        raise CommandError(
            EXIT_USAGE, "usage",
            f"{command + ': ' if command else ''}{message} (see `{self.prog} --help`)",
        )


def exit_code_table(rows: Sequence[tuple[int, str]]) -> str:
    """The exit codes of a command, for its ``--help``."""
    return "exit codes:\n" + "\n".join(f"  {code:>3}  {meaning}" for code, meaning in rows)


def add_command(
    subparsers: Any, name: str, summary: str, description: str | None,
    exit_codes: Sequence[tuple[int, str]],
) -> argparse.ArgumentParser:
    """A (sub)command whose ``--help`` shows its description as written and its exit codes."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=summary, description=description, epilog=exit_code_table(exit_codes),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def report(error: CommandError, as_json: bool) -> int:
    """Print ``error`` as one line (and as JSON on stdout for scripts); its exit code."""
    if as_json:
        print(json.dumps({"error": error.error, "message": error.message}))
    print(f"lifecycles: {error.message}", file=sys.stderr)
    return error.exit_code


def installed_version() -> str:
    try:
        return version("lifecycles")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="lifecycles",
        description="Explicit, durable state machines: check, draw and operate lifecycles.",
        epilog=f"Set {TRACEBACK_VARIABLE}=1 to see the traceback of an unexpected error.",
    )
    parser.add_argument("--version", action="version", version=f"lifecycles {installed_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module, command in COMMAND_MODULES.items():
        try:
            imported = importlib.import_module(module)
        except Exception as error:  # reported when the command is run; the others work
            _stand_in(subparsers, command, error)
            continue
        imported.register(subparsers)
    return parser


def _stand_in(subparsers: Any, command: str, error: Exception) -> None:
    """A ``command`` whose module did not import: it takes any arguments and reports
    ``error``, the one line of an invalid declaration (exit 2), else a bug (exit 70)."""
    parser = subparsers.add_parser(command, add_help=False,
                                   help="(cannot run: its module does not import)")
    parser.add_argument("arguments", nargs=argparse.REMAINDER)

    def report_import_failure(args: argparse.Namespace) -> int:
        from lifecycles._loading import import_failure
        from lifecycles.machines._declaration import DefinitionError

        if not isinstance(error, DefinitionError):
            raise error
        if os.environ.get(TRACEBACK_VARIABLE):
            traceback.print_exception(error)
        failure = import_failure(f"the {command} command", error)
        raise CommandError(EXIT_USAGE, failure.error, failure.message) from error

    parser.set_defaults(handler=report_import_failure)


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a command it killed


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in arguments
    try:
        args = build_parser().parse_args(arguments)
        code: int = args.handler(args)
        return code
    except CommandError as error:
        return report(error, as_json)
    except KeyboardInterrupt:
        print("lifecycles: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of the output went away (`lifecycles check | head`): stop quietly, as
        # a command killed by SIGPIPE does, and keep the exit flush from complaining.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as error:  # the promise: no traceback unless asked for
        if os.environ.get(TRACEBACK_VARIABLE):
            traceback.print_exc()
        summary = f"{type(error).__name__}: {error}".splitlines()[0]
        return report(
            CommandError(
                EXIT_INTERNAL,
                "internal_error",
                f"unexpected error ({summary}); this is a bug in lifecycles: please report "
                f"it with the output of the same command run with {TRACEBACK_VARIABLE}=1",
            ),
            as_json,
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
