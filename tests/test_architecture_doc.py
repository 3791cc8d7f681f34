"""docs/architecture.md names only what exists: every dotted name it cites in backticks (``loop.step.after_response``,
``control.permissions.policy.Policy.decide``) resolves in the package, and every file or folder it names is there."""

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "drivetrain"
PAGE = ROOT / "docs" / "architecture.md"
TOP = {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()} - {"__init__"}


def cited_names(text: str) -> list[str]:
    """Backticked dotted names that start at a module or folder of the package (``Agent(profile=SMALL)`` is code,
    not a citation; ``foo.py`` is a file)."""
    spans = re.findall(r"`([^`\n]+)`", text)
    return [
        s
        for s in spans
        if re.fullmatch(r"[a-z_]+(\.[A-Za-z_]+)+", s) and s.split(".")[0] in TOP and not s.endswith((".py", ".md"))
    ]


def cited_paths(text: str) -> list[str]:
    spans = re.findall(r"`([^`\n]+)`", text)
    return [s for s in spans if re.fullmatch(r"[\w./-]+(\.py|\.md|/)", s)]


def resolve(dotted: str) -> object:
    """The object a dotted name under ``drivetrain`` names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module("drivetrain." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)  # AttributeError: the page names something the code does not have
        return obj
    raise ModuleNotFoundError(dotted)


def test_the_page_cites_names_and_paths_at_all():
    text = PAGE.read_text()
    assert len(cited_names(text)) >= 30 and len(cited_paths(text)) >= 20


@pytest.mark.parametrize("name", sorted(set(cited_names(PAGE.read_text()))))
def test_every_cited_name_exists(name):
    resolve(name)


def test_every_named_file_or_folder_exists():
    missing = [p for p in cited_paths(PAGE.read_text()) if not any((base / p).exists() for base in (PACKAGE, ROOT))]
    assert missing == []


def test_the_check_fails_on_a_name_the_code_does_not_have():
    with pytest.raises(AttributeError):
        resolve("loop.step.after_the_response")
    with pytest.raises(ModuleNotFoundError):
        resolve("nowhere.at_all")
    assert cited_names("see `small.checks.WorkChecks._review` and `Agent(profile=SMALL)`") == [
        "small.checks.WorkChecks._review"
    ]
