"""The plugin's Hypothesis profiles: registered and loaded for any suite, never clobbering.

Each test runs a small suite in this process (pytester), which reads the profile its
own run ended up with; the fixture below puts this session's profiles back afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, settings

from lifecycles.machines.monitor import MONITOR
from lifecycles.machines.monitor.inputs import EXPLORATION
from lifecycles.stores._memory import MemoryStore
from lifecycles.testing import build_state_machine

pytest_plugins = ["pytester"]

SHOW_PROFILE = """
    from hypothesis import settings

    def test_show_profile():
        s = settings.default
        print(f"PROFILE {settings.get_current_profile_name()} {s.max_examples} "
              f"{s.stateful_step_count} {s.derandomize}")
"""


@pytest.fixture(autouse=True)
def own_profiles(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)
    saved = {name: settings.get_profile(name) for name in ("ci", "deep")}
    current = settings.get_current_profile_name()
    yield
    for name, profile in saved.items():
        settings.register_profile(name, profile)
    settings.load_profile(current)


def profile_seen(pytester: pytest.Pytester, *options: str) -> str:
    pytester.makepyfile(test_show=SHOW_PROFILE)
    result = pytester.runpytest_inprocess("-s", "-p", "no:cacheprovider", *options)
    assert result.ret == 0, result.stdout.str()
    found = re.search(r"PROFILE (.*)$", result.stdout.str(), flags=re.MULTILINE)
    assert found is not None, result.stdout.str()
    return found[1]


def test_a_suite_without_conftest_gets_ci_with_its_values(pytester: pytest.Pytester) -> None:
    assert profile_seen(pytester) == "ci 60 30 True"
    ci = settings.get_profile("ci")
    assert (ci.deadline, ci.print_blob, ci.suppress_health_check) == (
        None, True, (HealthCheck.too_slow,))
    deep = settings.get_profile("deep")
    assert (deep.max_examples, deep.stateful_step_count, deep.deadline, deep.derandomize,
            deep.suppress_health_check) == (2000, 100, None, False, (HealthCheck.too_slow,))


def test_hypothesis_profile_selects_deep(pytester: pytest.Pytester,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "deep")
    assert profile_seen(pytester) == "deep 2000 100 False"


def test_a_profile_the_conftest_loaded_stays(pytester: pytest.Pytester,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest("""
        from hypothesis import settings
        settings.register_profile("mine", max_examples=7)
        settings.load_profile("mine")
    """)
    assert profile_seen(pytester).startswith("mine 7 ")
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "deep")  # the conftest did not ask for it
    assert profile_seen(pytester).startswith("mine 7 ")


def test_even_loading_hypothesis_default_profile_is_seen(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        from hypothesis import settings
        settings.load_profile("default")
    """)
    assert profile_seen(pytester).startswith("default 100 50 ")


def test_hypothesis_profile_names_a_profile_the_conftest_registered(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest("""
        from hypothesis import settings
        settings.register_profile("mine", max_examples=7)
    """)
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "mine")
    assert profile_seen(pytester).startswith("mine 7 ")


def test_a_ci_profile_of_the_conftest_replaces_ours(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        from hypothesis import settings
        settings.register_profile("ci", max_examples=5, stateful_step_count=4)
    """)
    assert profile_seen(pytester).startswith("ci 5 4 ")


def test_a_profile_loaded_in_a_conftest_configure_hook_wins(pytester: pytest.Pytester
                                                            ) -> None:
    pytester.makeconftest("""
        from hypothesis import settings
        def pytest_configure(config):
            settings.register_profile("late", max_examples=9)
            settings.load_profile("late")
    """)
    assert profile_seen(pytester).startswith("late 9 ")


def test_the_hypothesis_profile_option_wins(pytester: pytest.Pytester,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    assert profile_seen(pytester, "--hypothesis-profile=deep") == "deep 2000 100 False"


def test_hypothesis_options_derive_from_our_profile(pytester: pytest.Pytester) -> None:
    assert profile_seen(pytester, "--hypothesis-verbosity=verbose").endswith(" 60 30 True")


def test_an_unknown_profile_name_is_a_usage_error(pytester: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "nonesuch")
    pytester.makepyfile(test_show=SHOW_PROFILE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*HYPOTHESIS_PROFILE=nonesuch*'nonesuch' is not registered*"])


def test_generated_tests_run_the_loaded_profile_without_explain() -> None:
    case = build_state_machine(EXPLORATION, lambda: MemoryStore(MONITOR),
                               record_coverage=False).TestCase
    profile = settings.get_profile(settings.get_current_profile_name())
    assert Phase.explain in profile.phases  # the profile keeps Hypothesis' phases
    assert Phase.explain not in case.settings.phases
    assert Phase.shrink in case.settings.phases
    assert case.settings.max_examples == profile.max_examples
    assert case.settings.stateful_step_count == profile.stateful_step_count


def test_hypothesis_explain_option_keeps_the_explain_phase(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_phases="""
        from hypothesis import Phase
        from lifecycles.machines.monitor import MONITOR
        from lifecycles.machines.monitor.inputs import EXPLORATION
        from lifecycles.stores._memory import MemoryStore
        from lifecycles.testing import build_state_machine

        def test_phases():
            case = build_state_machine(EXPLORATION, lambda: MemoryStore(MONITOR),
                                       record_coverage=False).TestCase
            print("EXPLAIN", Phase.explain in case.settings.phases)
    """)
    for options, shown in [((), "EXPLAIN False"), (("--hypothesis-explain",), "EXPLAIN True")]:
        result = pytester.runpytest_inprocess("-s", "-p", "no:cacheprovider", *options)
        assert result.ret == 0, result.stdout.str()
        result.stdout.fnmatch_lines([f"*{shown}"])


def test_registered_by_a_conftest_only_it_still_loads_ci(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    # No entry points: the plugin arrives with the conftest, after its module code ran.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest('pytest_plugins = ["lifecycles.testing"]')
    pytester.makepyfile(test_show=SHOW_PROFILE)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*PROFILE ci 60 30 True"])
