"""Architectural rules that keep answers away from agents and imports cheap."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "anyswe"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
            found |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return found


def test_agents_never_touch_grading() -> None:
    files = sorted((PKG / "agents").rglob("*.py"))
    assert len(files) >= 4
    for f in files:
        bad = {m for m in imported_modules(f) if m.startswith(("anyswe.grading", "swebench"))}
        assert not bad, f"{f.name} imports grading code: {bad}"
        text = f.read_text()
        for name in ("grade_patch", "eval_report", "get_eval_report", "test_patch", "FAIL_TO_PASS"):
            assert name not in text, f"{f.name} mentions {name}"


def test_only_the_adapter_imports_swebench() -> None:
    """The adapter is grading/swebench.py and its private loader, which nothing else may import."""
    adapter, loader = "grading/swebench.py", "grading/_swebench_lean.py"
    code = [f for f in PKG.rglob("*.py") if "demo/tasks" not in str(f)]
    users = sorted(
        str(f.relative_to(PKG)) for f in code if any(m.split(".")[0] == "swebench" for m in imported_modules(f))
    )
    assert users == [loader, adapter]
    loader_users = sorted(
        str(f.relative_to(PKG))
        for f in code
        if any(m.startswith("anyswe.grading._swebench_lean") for m in imported_modules(f))
    )
    assert loader_users == [adapter]


def test_import_anyswe_is_cheap() -> None:
    code = (
        "import sys, anyswe, anyswe.cli, anyswe.spec; "
        "heavy = [m for m in ('polars', 'swebench', 'python_on_whales', 'docker') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_api_resolves() -> None:
    import anyswe

    for name in anyswe.__all__:
        assert getattr(anyswe, name) is not None, name


def _compares_with(path: Path, values: set[str]) -> list[int]:
    """Lines where ``path`` compares something with one of ``values`` (==, !=, in, match case)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            consts = [c for c in (node.left, *node.comparators) if isinstance(c, ast.Constant)]
            consts += [e for c in node.comparators if isinstance(c, (ast.Tuple, ast.List, ast.Set)) for e in c.elts]
            if any(isinstance(c, ast.Constant) and c.value in values for c in consts):
                lines.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and isinstance(node.value, ast.Constant) and node.value.value in values:
            lines.append(node.lineno)
    return lines


#: What runs a runtime: its executables (an argv's head) and the image URIs only it reads.
RUNTIME_EXECUTABLES = {"docker", "apptainer", "singularity", "podman"}
RUNTIME_URI = ("docker://", "docker-archive://", "docker-daemon://", "instance://", "oras://")
RUNTIME_CLIENTS = ("python_on_whales", "spython")


def _runtime_names(path: Path, providers: set[str]) -> list[str]:
    """Where ``path`` names a runtime: a provider's name as a value (a default, a comparison, a
    tuple of them), an argv that runs a runtime's executable, or an image URI only a runtime reads."""
    found = [f"{line} {value!r}" for value, line in _string_constants(path).items() if value in providers]
    found += [f"{line} {value!r}" for value, line in _string_constants(path).items() if value.startswith(RUNTIME_URI)]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            head = node.elts[0]
            if isinstance(head, ast.Constant) and head.value in RUNTIME_EXECUTABLES:
                found.append(f"{node.lineno} runs {head.value}")
        elif isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            if isinstance(head, ast.Constant) and str(head.value).startswith(RUNTIME_URI):
                found.append(f"{node.lineno} {head.value!r}")
    return found


def test_only_sandbox_names_or_runs_a_runtime() -> None:
    """Runtimes plug in by registry: outside sandbox/, nothing imports a runtime's client or a provider's
    module, runs a runtime's executable, or acts on a provider's name. Image builds and pulls go through
    the image store (sandbox/store.py), a provider's own artefacts through its ArtefactKind."""
    from anyswe.sandbox import PROVIDERS

    providers = set(PROVIDERS.builtin_names())
    assert {"docker", "apptainer"} <= providers
    own = tuple(f"anyswe.sandbox.{m}" for m in (*providers, "sif", "helper"))
    outside = [f for f in PKG.rglob("*.py") if "sandbox" not in f.relative_to(PKG).parts]
    assert len(outside) > 60
    found = []
    for f in outside:
        rel = f.relative_to(PKG)
        bad = {m for m in imported_modules(f) if m.startswith((*RUNTIME_CLIENTS, *own))}
        found += [f"{rel} imports {m}" for m in sorted(bad)]
        found += [f"{rel}:{hit}" for hit in _runtime_names(f, providers)]
        found += [f"{rel}:{line} compares with a provider" for line in _compares_with(f, providers)]
    assert found == [], "\n".join(found)


def test_the_runtime_check_sees_each_kind_of_naming(tmp_path: Path) -> None:
    """The check above fails on each thing it forbids (a planted module of each)."""
    planted = {
        "argv": 'ARGV = ["docker", "pull", "x"]\n',
        "name": 'def f(provider: str = "apptainer") -> str:\n    return provider\n',
        "uri": 'def f(ref: str) -> str:\n    return f"docker://{ref}"\n',
        "compare": "def f(p: str) -> bool:\n    return p in ('docker', 'apptainer')\n",
    }
    for what, text in planted.items():
        path = tmp_path / f"{what}.py"
        path.write_text(text)
        assert _runtime_names(path, {"docker", "apptainer"}) or _compares_with(path, {"docker", "apptainer"}), what
    (tmp_path / "client.py").write_text("import python_on_whales\n")
    assert "python_on_whales" in imported_modules(tmp_path / "client.py")


def test_datasets_do_not_import_grading() -> None:
    for f in sorted((PKG / "datasets").rglob("*.py")):
        if "demo/tasks" in str(f):
            continue
        bad = {m for m in imported_modules(f) if m.startswith("anyswe.grading")}
        assert not bad, f"{f.relative_to(PKG)} imports {bad}: routing to harnesses lives in grading/"


def test_modules_and_functions_stay_small() -> None:
    for f in PKG.rglob("*.py"):
        if "demo/tasks" in str(f):
            continue
        text = f.read_text()
        assert text.count("\n") <= 400, f"{f.relative_to(PKG)} has {text.count(chr(10))} lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                assert length <= 60, f"{f.relative_to(PKG)}:{node.lineno} {node.name} has {length} lines"


#: Modules private to the package as a whole: shared helpers every layer may import (an underscore module
#: says "not part of the public API", not "private to one module").
SHARED_PRIVATE_MODULES = {"_proc", "_files", "_yaml", "_sync", "_threads", "_text", "_overrides"}


def _private_names_of_others(path: Path) -> list[str]:
    """``from anyswe.x import _name`` and ``module._name`` on an imported anyswe module, in ``path``."""
    tree = ast.parse(path.read_text())
    modules: set[str] = set()  # local names bound to anyswe modules
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("anyswe"):
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and alias.name not in SHARED_PRIVATE_MODULES:
                    found.append(f"{path.relative_to(PKG)}:{node.lineno} {node.module}.{alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("anyswe")}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{path.relative_to(PKG)}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def test_no_module_reaches_into_another_modules_private_names() -> None:
    code = [f for f in PKG.rglob("*.py") if "demo/tasks" not in str(f)]
    # The adapter's loader is private to the adapter (test_only_the_adapter_imports_swebench).
    found = [x for f in code for x in _private_names_of_others(f) if "_swebench_lean" not in x]
    assert found == [], "\n".join(found)


def _string_constants(path: Path) -> dict[str, int]:
    """Each string constant of ``path`` (docstrings and comments are not constants that act) -> a line."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value: node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def test_benchmarks_and_agents_are_named_only_in_their_own_packages() -> None:
    """A benchmark's names live in datasets/ (its Benchmark class and the registry), an agent's in agents/:
    no other module acts on one by name (the spec's and the server's defaults excepted, named here)."""
    from anyswe.agents import AGENTS
    from anyswe.datasets.registry import BENCHMARKS

    # Canonical and hub names, as written (aliases such as "full" or "lite" are everyday words).
    benchmark_names = {n for b in BENCHMARKS.builtin_names() for n in (b, *BENCHMARKS.load(b).hub_names)}
    agent_names = set(AGENTS.builtin_names())
    allowed = {
        ("serve_request.py", "mini-swe-agent"),  # the default agent block of `anyswe serve`
        ("prepare/gold.py", "gold"),  # gold-check runs the gold agent: its whole purpose
        ("model.py", "replay"),  # a model block's replay source, not the agent
        ("spec.py", "replay"),
        ("execute/upstreams.py", "replay"),  # the replay upstream (a model's recorded replies), not the agent
    }
    found = []
    for f in PKG.rglob("*.py"):
        rel = str(f.relative_to(PKG))
        if rel.startswith(("datasets/", "agents/")):
            continue
        for value, line in _string_constants(f).items():
            if value in benchmark_names or (value in agent_names and (rel, value) not in allowed):
                found.append(f"{rel}:{line} {value!r}")
    assert found == [], "\n".join(found)


def test_architecture_names_every_module() -> None:
    """docs/architecture.md is the map of the package: a module it does not name is one a reader cannot find."""
    doc = (PKG.parent / "docs" / "architecture.md").read_text()
    modules = [f for f in PKG.rglob("*.py") if "demo/tasks" not in str(f) and f.name != "__init__.py"]
    missing = [str(f.relative_to(PKG)) for f in modules if f.name not in doc]
    assert len(modules) > 100 and missing == []
