"""Check the layer rule of ../shared/ARCHITECTURE.md on every package under packages/.

A package's source may import only shardrec packages of a strictly lower layer that it declares in
`[project] dependencies`; its tests may also import what its `test` extra declares. Each package
states its layer in `[tool.shardrec] layer`. Exits 1 and prints every violation with its file and
line.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "packages"


def _dist_name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].strip()


def _import_name(dist: str) -> str:
    return dist.replace("-", "_")


def _imported_roots(path: pathlib.Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def check(root: pathlib.Path) -> list[str]:
    """Every layer-rule violation under `root`/packages, one readable line each."""
    meta = {}
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        data = tomllib.loads(pyproject.read_text())
        project = data["project"]
        layer = data.get("tool", {}).get("shardrec", {}).get("layer")
        if not isinstance(layer, int):
            return [f"{pyproject}: [tool.shardrec] layer must be an integer, got {layer!r}"]
        runtime = {_dist_name(r) for r in project.get("dependencies", [])}
        test = {_dist_name(r) for r in project.get("optional-dependencies", {}).get("test", [])}
        meta[project["name"]] = (layer, runtime, test, pyproject.parent)

    ours = {_import_name(d): d for d in meta}
    errors: list[str] = []
    for dist, (layer, runtime, test, folder) in meta.items():
        for dep in runtime & set(meta):
            if meta[dep][0] >= layer:
                errors.append(
                    f"{dist} (layer {layer}) declares {dep} (layer {meta[dep][0]}): "
                    "a package may depend only on strictly lower layers"
                )
        for kind, allowed in (("src", runtime), ("tests", runtime | test)):
            for path in sorted((folder / kind).rglob("*.py")):
                for lineno, mod in _imported_roots(path):
                    if not mod.startswith("shardrec") or mod == _import_name(dist):
                        continue
                    other = ours.get(mod)
                    rel = path.relative_to(root)
                    if other is None:
                        errors.append(f"{rel}:{lineno}: imports {mod}, which no package provides")
                    elif other not in allowed:
                        where = "dependencies" if kind == "src" else "dependencies or test extra"
                        errors.append(
                            f"{rel}:{lineno}: imports {mod} but {dist} does not declare {other} "
                            f"in its {where}"
                        )
                    elif kind == "src" and meta[other][0] >= layer:
                        errors.append(
                            f"{rel}:{lineno}: {dist} (layer {layer}) imports {mod} "
                            f"(layer {meta[other][0]}): only strictly lower layers are allowed"
                        )
    return errors


def main() -> int:
    errors = check(ROOT)
    for e in errors:
        print(e)
    count = len(list(PACKAGES.glob("*/pyproject.toml")))
    print(f"layers: {count} packages checked, {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
