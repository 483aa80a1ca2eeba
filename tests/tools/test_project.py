"""lifecycles.project: [tool.lifecycles] found from any directory of a project, its
settings, the entry-point group, and the mistakes each refused with one stable code."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.project import fresh_imports, refund_package, write_pyproject

from lifecycles._loading import CheckerError
from lifecycles._registry import registered
from lifecycles.project import (
    ENTRY_POINT_GROUP,
    StoreURL,
    available,
    find_project,
    installed,
    own,
    resolve,
    store_url,
)

__all__ = ["fresh_imports"]  # the fixture, used by name
pytestmark = pytest.mark.usefixtures("fresh_imports")

SETTINGS = '''\
modules = ["refunds.lifecycle", "jobs/more.py"]
statuses = "state/statuses.json"
diagrams = "docs/diagrams"
store = "sqlite:data/refunds.db"
'''


def test_the_project_is_found_from_any_of_its_directories(tmp_path: Path) -> None:
    root = tmp_path / "service"
    pyproject = write_pyproject(root, SETTINGS)
    deep = root / "src" / "deep"
    deep.mkdir(parents=True)
    (deep / "pyproject.toml").write_text('[project]\nname = "inner"\n')  # no [tool.lifecycles]
    for start in (root, deep):
        project = find_project(start)
        assert project is not None
        assert (project.root, project.pyproject) == (root, pyproject)
        assert project.modules == ("refunds.lifecycle", str(root / "jobs" / "more.py"))
        assert project.statuses == root / "state" / "statuses.json"
        assert project.diagrams == root / "docs" / "diagrams"
        assert project.store == StoreURL("sqlite", str(root / "data" / "refunds.db"))


def test_defaults_and_no_project(tmp_path: Path) -> None:
    write_pyproject(tmp_path / "a", "")
    project = find_project(tmp_path / "a")
    assert project is not None
    assert project.modules == () and project.store is None
    assert project.statuses == tmp_path / "a" / "lifecycle-statuses.json"
    assert project.diagrams == tmp_path / "a" / "diagrams"
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "pyproject.toml").write_text('[tool.ruff]\nline-length = 100\n')
    assert find_project(tmp_path / "b") is None


@pytest.mark.parametrize(("text", "expected"), [
    ("sqlite:data/x.db", StoreURL("sqlite", "ROOT/data/x.db")),
    ("files:records", StoreURL("files", "ROOT/records")),
    ("postgresql://app@db:5432/refunds", StoreURL("postgresql", "postgresql://app@db:5432/refunds")),
    ("postgres://db/refunds", StoreURL("postgresql", "postgres://db/refunds")),
])
def test_store_settings(tmp_path: Path, text: str, expected: StoreURL) -> None:
    found = store_url(text, tmp_path)
    assert found == StoreURL(expected.kind, expected.location.replace("ROOT", str(tmp_path)))


@pytest.mark.parametrize(("settings", "key", "problem"), [
    ('modles = ["a"]\n', "modles", "unknown key (known: modules, statuses, diagrams, store)"),
    ('modules = "refunds.lifecycle"\n', "modules", "expected a list of strings"),
    ("modules = [1]\n", "modules", "expected a non-empty string, not 1"),
    ("statuses = 3\n", "statuses", "expected a non-empty string, not 3"),
    ('diagrams = ""\n', "diagrams", "expected a non-empty string"),
    ('store = "mysql://db"\n', "store", "'mysql://db' is not one of sqlite:PATH"),
    ('store = "sqlite:"\n', "store", "'sqlite:' is not one of sqlite:PATH"),
])
def test_an_invalid_setting_names_the_file_and_the_key(
    tmp_path: Path, settings: str, key: str, problem: str
) -> None:
    pyproject = write_pyproject(tmp_path, settings)
    with pytest.raises(CheckerError) as raised:
        find_project(tmp_path)
    assert raised.value.error == "project_invalid"
    assert raised.value.message.startswith(f"{pyproject}: [tool.lifecycles] {key}: {problem}")
    assert "\n" not in raised.value.message


def test_a_pyproject_that_is_not_toml_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.lifecycles\nmodules = 1\n")
    with pytest.raises(CheckerError) as raised:
        find_project(tmp_path)
    assert raised.value.error == "project_invalid"
    assert raised.value.message.startswith(f"{tmp_path / 'pyproject.toml'}: not valid TOML (")


def test_a_project_covers_its_own_lifecycles_and_names_reach_the_shipped_ones(
    tmp_path: Path,
) -> None:
    refund_package(tmp_path)
    write_pyproject(tmp_path, 'modules = ["refunds.lifecycle"]\n')
    assert list(own(start=tmp_path)) == ["refund"]  # dotted: imported from the root
    assert set(available(start=tmp_path)) == {"refund", *registered()}
    assert resolve("monitor", start=tmp_path) is registered()["monitor"]
    assert resolve("refund", start=tmp_path).module == "refunds.lifecycle"
    with pytest.raises(CheckerError) as raised:
        resolve("refnud", start=tmp_path)
    assert raised.value.error == "unknown_lifecycle"
    assert "'refnud'" in raised.value.message and "['monitor', 'outbox', 'refund']" in \
        raised.value.message


def test_outside_a_project_every_installed_lifecycle_is_covered(tmp_path: Path) -> None:
    assert list(own(start=tmp_path)) == list(registered())


def test_a_module_that_declares_no_lifecycle_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_text("VALUE = 1\n")
    write_pyproject(tmp_path, 'modules = ["empty.py"]\n')
    for call in (lambda: own(start=tmp_path), lambda: resolve("refund", start=tmp_path)):
        with pytest.raises(CheckerError) as raised:
            call()
        assert raised.value.error == "no_lifecycle"
        assert raised.value.message.startswith(f"{tmp_path / 'empty.py'} declares no lifecycle")
        assert raised.value.message.endswith(
            f"(named in {tmp_path / 'pyproject.toml'} [tool.lifecycles] modules)")


def test_a_missing_module_file_is_refused(tmp_path: Path) -> None:
    write_pyproject(tmp_path, 'modules = ["refunds/lifecycle.py"]\n')
    with pytest.raises(CheckerError) as raised:
        own(start=tmp_path)
    assert raised.value.error == "module_not_found"
    assert raised.value.message == (f"no such file: {tmp_path / 'refunds' / 'lifecycle.py'} "
                                    f"(named in {tmp_path / 'pyproject.toml'} "
                                    "[tool.lifecycles] modules)")


def test_two_lifecycles_of_one_name_are_refused_naming_both_modules(tmp_path: Path) -> None:
    refund_package(tmp_path, "refunds")
    refund_package(tmp_path, "refunds_again")
    write_pyproject(tmp_path, 'modules = ["refunds.lifecycle", "refunds_again/lifecycle.py"]\n')
    with pytest.raises(CheckerError) as raised:
        own(start=tmp_path)
    assert raised.value.error == "duplicate_name"
    assert raised.value.message.startswith(
        "two lifecycles are named 'refund': one in refunds.lifecycle, one in "
        "refunds_again.lifecycle; rename one")


def entry_point_site(where: Path, value: str) -> Path:
    """A directory on which importlib.metadata finds an installed distribution
    ``refund-plugins`` whose entry point ``refunds`` is ``value``, and its package."""
    site = where / "site"
    refund_package(site, "plugin_refunds")
    (site / "plugin_refunds" / "not_one.py").write_text("THING = object()\n")
    info = site / "refund_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: refund-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nrefunds = {value}\n")
    return site


@pytest.mark.parametrize("value", ["plugin_refunds.lifecycle:REFUND", "plugin_refunds.lifecycle"])
def test_an_installed_distribution_contributes_through_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    assert [lifecycle.name for lifecycle in installed()] == list(registered())
    monkeypatch.syspath_prepend(str(entry_point_site(tmp_path, value)))
    assert [lifecycle.name for lifecycle in installed()] == [*registered(), "refund"]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert list(own(start=outside)) == [*registered(), "refund"]
    assert resolve("refund", start=outside).module == "plugin_refunds.lifecycle"


def test_an_entry_point_that_names_no_lifecycle_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(entry_point_site(tmp_path, "plugin_refunds.not_one:THING")))
    with pytest.raises(CheckerError) as raised:
        installed()
    assert raised.value.error == "no_lifecycle"
    assert raised.value.message.startswith(
        "the entry point refunds = plugin_refunds.not_one:THING of refund-plugins "
        f"({ENTRY_POINT_GROUP}) names no lifecycle")


def test_an_entry_point_and_a_project_module_of_one_name_clash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(entry_point_site(tmp_path, "plugin_refunds.lifecycle")))
    project = tmp_path / "service"
    refund_package(project)
    write_pyproject(project, 'modules = ["refunds/lifecycle.py"]\n')
    assert list(own(start=project)) == ["refund"]  # the project's own: no clash to see
    with pytest.raises(CheckerError) as raised:
        available(start=project)
    assert raised.value.error == "duplicate_name"
    assert "one in plugin_refunds.lifecycle, one in refunds.lifecycle" in raised.value.message
