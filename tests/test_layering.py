"""The package's dependencies point one way: ``model`` (the golden model) imports none of the other
packages, ``hdl`` (gateware) imports only ``model``, and ``sim`` / ``fpga`` sit on top. No installed
module reaches the test files through ``sys.path``: the one exception is :func:`rnic.sim.toolchain.run`,
which puts a cocotb test module's folder on the path because cocotb's runner imports the module by
name. Read from the sources (``ast``), so nothing is imported."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("model", "hdl", "sim", "fpga")
#: what each package may not import
FORBIDDEN = {"model": {"hdl", "sim", "fpga"}, "hdl": {"sim", "fpga"}}
#: (file, function) allowed to touch ``sys.path``
SYS_PATH_ALLOWED = {("sim/toolchain.py", "run")}


def _modules(package):
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path, package: str):
    """``(line, imported module)`` for every import in ``path``, relative ones resolved against the
    module's own package (``rnic.<package>``, or a subpackage of it for a file in a subfolder):
    ``from ..sim.toolchain import x`` in hdl/ gives ``rnic.sim.toolchain``."""
    try:
        package = ".".join(path.parent.relative_to(ROOT).parts)
    except ValueError:
        pass
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                here = ["rnic", *package.split(".")]
                base = here[:max(0, len(here) + 1 - node.level)]
                yield node.lineno, ".".join(base + ([node.module] if node.module else []))
            else:
                yield node.lineno, node.module


def _package_of(module: str):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "rnic" else None


def test_resolves_relative_imports(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from ..sim.toolchain import run\nfrom .bus import X\nfrom .. import model\n"
                     "import rnic.fpga.synth\n")
    assert [m for _, m in _imports(probe, "hdl")] == ["rnic.sim.toolchain", "rnic.hdl.bus", "rnic", "rnic.fpga.synth"]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_dependencies_point_one_way(package):
    bad = [f"{path.relative_to(ROOT)}:{line}: {module}"
           for path in _modules(package) for line, module in _imports(path, package)
           if _package_of(module) in FORBIDDEN[package]]
    assert not bad, f"{package}/ may not import {sorted(FORBIDDEN[package])}:\n" + "\n".join(bad)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_test_modules_through_sys_path(package):
    bad = []
    for path in _modules(package):
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(), rel)
        functions = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
                    and node.value.id == "sys"):
                inside = {f.name for f in functions if f.lineno <= node.lineno <= f.end_lineno}
                if not any((rel, name) in SYS_PATH_ALLOWED for name in inside):
                    bad.append(f"{rel}:{node.lineno}: sys.path")
        for line, module in _imports(path, package):
            if module and (module.split(".")[-1].startswith("test_") or "cocotb_tests" in module):
                bad.append(f"{rel}:{line}: imports {module}")
    assert not bad, "installed modules reach test files:\n" + "\n".join(bad)


@pytest.mark.parametrize("package", PACKAGES)
def test_one_import_style(package):
    """Inside the package, modules import each other relatively (``from ..model.qpc import X``),
    never as ``rnic.*``: one style, and a module works under any installed name."""
    bad = []
    for path in _modules(package):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n and n.split(".")[0] == "rnic"]
    assert not bad, "absolute rnic imports inside the package:\n" + "\n".join(bad)
