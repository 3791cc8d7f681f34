"""The package's layers hold: no import points up a layer or at the public API, no import cycle between modules and
none between folders (the import statements are read from the source, TYPE_CHECKING and function-level ones
included)."""

import subprocess
import sys
from pathlib import Path

import layers

ROOT = Path(__file__).resolve().parent.parent


def test_no_import_points_up_a_layer_and_there_is_no_cycle():
    assert layers.problems() == []


def test_the_check_sees_an_upward_import_a_cycle_and_a_module_without_a_layer(monkeypatch):
    real = layers.graph()
    fake = {
        **real,
        "loop.state": real["loop.state"] | {"agent"},
        "loop.calls": real["loop.calls"] | {"loop.guard"},
        "brand_new": set(),
    }
    monkeypatch.setattr(layers, "graph", lambda: fake)
    found = layers.problems()
    assert any("drivetrain.loop.state" in p and "imports drivetrain.agent, a layer above" in p for p in found)
    assert any(p.startswith("import cycle:") and "drivetrain.loop.guard" in p for p in found)
    assert "drivetrain.brand_new has no layer in tests/layers.py LAYERS" in found


def test_the_check_sees_two_folders_that_import_each_other(monkeypatch):
    real = layers.graph()
    # loop.step already imports control; control.gate importing loop.events makes the two folders a cycle, though
    # no module cycle and no upward import within one layer's order need come of it
    fake = {**real, "control.gate": real["control.gate"] | {"loop.events"}}
    monkeypatch.setattr(layers, "graph", lambda: fake)
    assert any(p.startswith("folder cycle:") and "control" in p and "loop" in p for p in layers.problems())
    assert layers.folder_graph(real)["control"].isdisjoint({"loop", "sessions", "agent", "cli"})


def test_import_drivetrain_pulls_in_no_front_end_profile_or_plans():
    code = (
        "import sys, drivetrain; print(sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['drivetrain', 'cli'], ['drivetrain', 'serve'], ['drivetrain', 'small'], ['drivetrain', 'plans'])))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_plans_stay_in_the_public_api():
    import drivetrain
    from drivetrain.plans.plan import Plan

    assert drivetrain.Plan is Plan and callable(drivetrain.apply_plan)


def test_the_architecture_page_shows_the_layers_as_the_code_has_them():
    page = (ROOT / "docs" / "architecture.md").read_text()
    assert f"```mermaid\n{layers.mermaid()}\n```" in page


def test_the_old_name_of_apply_plan_still_imports_for_one_release_with_a_warning():
    import pytest

    import drivetrain
    from drivetrain.plans import scheduler

    with pytest.warns(DeprecationWarning, match="apply_plan"):
        assert drivetrain.run_plan is drivetrain.apply_plan
    with pytest.warns(DeprecationWarning, match="apply_plan"):
        assert scheduler.run_plan is scheduler.apply_plan
