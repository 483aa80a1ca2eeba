"""The README's tour lists the package as it is: one line per package and module of
lifecycles/, machines/, invariants/ and stores/, and no line for a file that is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("lifecycles", "machines", "invariants", "stores")
# An entry: its name at an indentation of two spaces a level, then two spaces or more and
# what it is. A wrapped description would start deeper, and is not an entry.
ENTRY = re.compile(r"^(?P<indent>(?:  )*)(?P<name>[\w.-]+/?)(?:\s{2,}|$)")


def tour_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    tour = text[text.index("\n## A tour\n"):]
    block = tour[tour.index("\n```\n") + 5:]
    return block[:block.index("\n```\n")].splitlines()


def tour_entries(lines: list[str]) -> set[str]:
    """Each path the tour names, as a path from the repository root."""
    found: set[str] = set()
    folders: list[str] = []
    for line in lines:
        entry = ENTRY.match(line)
        assert entry, f"not one entry of the tour: {line!r}"
        depth = len(entry["indent"]) // 2
        assert depth <= len(folders), f"{line!r} is deeper than the folder above it"
        folders = folders[:depth]
        name = entry["name"]
        found.add("/".join([*folders, name.rstrip("/")]) + ("/" if name.endswith("/") else ""))
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
    return found


def files_on_disk() -> set[str]:
    """Every module, SQL file and package folder of the four parts (the links inside
    lifecycles/ to the other three counted once, as the folders they are)."""
    found: set[str] = set()
    for part in PARTS:
        found.add(f"{part}/")
        for path in (ROOT / part).rglob("*"):
            relative = path.relative_to(ROOT)
            if "__pycache__" in relative.parts or (
                    part == "lifecycles" and relative.parts[1:2]
                    and relative.parts[1] in PARTS):
                continue
            if path.is_dir() and (path / "__init__.py").exists():
                found.add(f"{relative.as_posix()}/")
            elif path.suffix in (".py", ".sql"):
                found.add(relative.as_posix())
    return found


def test_the_tour_names_every_module_and_only_those() -> None:
    named = {path for path in tour_entries(tour_lines())
             if path.split("/")[0] + "/" in {f"{p}/" for p in PARTS}}
    on_disk = files_on_disk()
    assert sorted(on_disk - named) == [], "missing from the README's tour"
    assert sorted(named - on_disk) == [], "in the README's tour, not on disk"


def test_the_tour_lines_fit_a_terminal() -> None:
    assert [line for line in tour_lines() if len(line) > 100] == []


def test_the_entry_reader_follows_folders() -> None:
    assert tour_entries(["a/    x", "  b.py   y", "  c/   z", "    d.py  w", "e.py  v"]) == {
        "a/", "a/b.py", "a/c/", "a/c/d.py", "e.py"}
