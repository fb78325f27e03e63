"""The layer check must catch each kind of violation on a small fake monorepo."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

_SPEC = importlib.util.spec_from_file_location(
    "check_layers", pathlib.Path(__file__).resolve().parent.parent / "check_layers.py"
)
assert _SPEC is not None and _SPEC.loader is not None
check_layers = importlib.util.module_from_spec(_SPEC)
sys.modules["check_layers"] = check_layers
_SPEC.loader.exec_module(check_layers)


def _package(
    root: pathlib.Path, name: str, layer: int, deps: list[str], src: str, test: str = ""
) -> None:
    folder = root / "packages" / f"shardrec-{name}"
    (folder / "src" / f"shardrec_{name}").mkdir(parents=True)
    (folder / "tests").mkdir()
    dep_list = ", ".join(f'"shardrec-{d}>=0.1"' for d in deps)
    (folder / "pyproject.toml").write_text(
        f'[project]\nname = "shardrec-{name}"\ndependencies = [{dep_list}]\n'
        '[project.optional-dependencies]\ntest = ["shardrec-testing>=0.1"]\n'
        f"[tool.shardrec]\nlayer = {layer}\n"
    )
    (folder / "src" / f"shardrec_{name}" / "__init__.py").write_text(src)
    (folder / "tests" / "test_x.py").write_text(test)


def _repo(tmp_path: pathlib.Path, embedding_src: str, jagged_src: str = "") -> pathlib.Path:
    _package(tmp_path, "jagged", 0, [], jagged_src)
    _package(tmp_path, "testing", 0, [], "")
    _package(tmp_path, "optim", 0, [], "")
    _package(tmp_path, "embedding", 1, ["jagged"], embedding_src, "import shardrec_testing\n")
    return tmp_path


def test_clean_repo_passes(tmp_path: pathlib.Path) -> None:
    assert check_layers.check(_repo(tmp_path, "import shardrec_jagged\n")) == []


def test_undeclared_sibling_is_reported(tmp_path: pathlib.Path) -> None:
    errors = check_layers.check(_repo(tmp_path, "from shardrec_optim import x\n"))
    assert len(errors) == 1
    assert "shardrec_optim" in errors[0] and "does not declare shardrec-optim" in errors[0]


def test_upward_import_is_reported(tmp_path: pathlib.Path) -> None:
    errors = check_layers.check(_repo(tmp_path, "", jagged_src="import shardrec_embedding.x\n"))
    assert len(errors) == 1
    assert "shardrec-jagged" in errors[0] and "shardrec_embedding" in errors[0]


def test_unknown_shardrec_module_is_reported(tmp_path: pathlib.Path) -> None:
    errors = check_layers.check(_repo(tmp_path, "import shardrec_nothing\n"))
    assert errors == [
        "packages/shardrec-embedding/src/shardrec_embedding/__init__.py:1: "
        "imports shardrec_nothing, which no package provides"
    ]


def test_same_layer_dependency_is_reported(tmp_path: pathlib.Path) -> None:
    _repo(tmp_path, "")
    _package(tmp_path, "collectives", 1, ["embedding"], "import shardrec_embedding\n")
    errors = check_layers.check(tmp_path)
    assert any("declares shardrec-embedding (layer 1)" in e for e in errors)
    assert any("only strictly lower layers" in e for e in errors)
