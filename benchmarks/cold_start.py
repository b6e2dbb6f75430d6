"""(5) Cold start: each function's ``import app`` in a fresh process against a bare
import of just the libraries its code imports, and peak memory.

"The libraries it uses" are read from the source, not guessed: every ``import``
of the function's ``app.py`` and, following ``seckill.*`` imports, of every layer
module it reaches, minus the project's own modules and typing-only imports. The
bare import imports exactly those (the same dotted names); the difference is what
the function's own initialisation costs (clients built at import, Powertools
objects, what they pull in). A second bare figure counts only the module-level
imports (what the code asks for at import; the rest it imports lazily). Each
child times only its imports (the interpreter's own start is not counted) and
reports its peak RSS (``ru_maxrss``); the kinds take turns, and the median is
kept. The layer is on ``PYTHONPATH`` as Lambda puts it on ``sys.path``; the
environment is the function's, as in every benchmark.
"""

from __future__ import annotations

import ast
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.testbed import StackInfo, function_env
from seckill_local.checkout import ROOT
from seckill_local.template import Template

LAYER = ROOT / "layers"
FIRST_PARTY = "seckill"

_CHILD = """
import json, resource, sys, time
started = time.perf_counter()
{imports}
seconds = time.perf_counter() - started
tops = sorted({{name.split(".")[0] for name in sys.modules}})
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"seconds": seconds, "maxrss_kb": rss, "modules": tops}}))
"""


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports(path: Path, *, anywhere: bool) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) of a file: its module-level imports, or every
    import it makes anywhere (in functions too); typing-only imports never count."""
    found: list[tuple[str, list[str]]] = []
    todo = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        if _is_type_checking(node):
            continue
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module != "__future__":
            found.append((node.module, [alias.name for alias in node.names]))
        elif anywhere or isinstance(node, ast.Try | ast.If | ast.With):
            todo.extend(ast.iter_child_nodes(node))
    return found


def libraries(app: Path, *, anywhere: bool) -> list[str]:
    """The non-project modules app.py and the layer modules it reaches import: at module
    level (what its import must load), or anywhere (everything its code may ever use)."""
    seen: set[Path] = set()
    external: set[str] = set()
    todo = [app]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module, names in _imports(path, anywhere=anywhere):
            if module.split(".")[0] != FIRST_PARTY:
                external.add(module)
                continue
            base = LAYER.joinpath(*module.split("."))
            candidates = [base.with_suffix(".py"), base / "__init__.py"]
            candidates += [base / f"{name}.py" for name in names]
            todo.extend(c for c in candidates if c.is_file())
    return sorted(external)


def _child(code: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    # Our own interpreter running our own import lines.
    out = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"import failed in a fresh process: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(info: StackInfo, repeats: int, functions: list[str] | None, progress: Callable[[str], None]) -> dict[str, Any]:
    template = Template.load()
    rows = []
    for logical_id, fn in template.functions.items():
        if functions and logical_id not in functions:
            continue
        module = fn.handler.rpartition(".")[0]
        app = fn.code_uri / f"{module}.py"
        named = {"bare": libraries(app, anywhere=True), "bare_module_level": libraries(app, anywhere=False)}
        env = {**os.environ, **function_env(info, logical_id, template), "PYTHONPATH": str(LAYER)}
        codes = {
            "init": _CHILD.format(imports=f"sys.path.insert(0, {str(fn.code_uri)!r})\nimport {module}"),
            **{kind: _CHILD.format(imports="\n".join(f"import {lib}" for lib in libs)) for kind, libs in named.items()},
        }
        progress(f"cold start: {logical_id} ({repeats} x {len(codes)} fresh processes)")
        samples: dict[str, list[dict[str, Any]]] = {kind: [] for kind in codes}
        _child(codes["init"], env, fn.code_uri)  # byte-code caches written: every kind reads compiled modules
        kinds = list(codes)
        for r in range(repeats):
            for kind in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
                samples[kind].append(_child(codes[kind], env, fn.code_uri))
        ms = {kind: statistics.median(x["seconds"] for x in samples[kind]) * 1e3 for kind in codes}
        init, bare = ms["init"], ms["bare"]
        extra = sorted(set(samples["init"][0]["modules"]) - set(samples["bare"][0]["modules"]) - {module, FIRST_PARTY})
        rows.append(
            {
                "function": logical_id,
                "init_ms": round(init, 1),
                "bare_imports_ms": round(bare, 1),
                "ratio": round(init / bare, 3) if bare else None,
                "bare_module_level_ms": round(ms["bare_module_level"], 1),
                "ratio_module_level": round(init / ms["bare_module_level"], 3) if ms["bare_module_level"] else None,
                "init_rss_mb": round(max(s["maxrss_kb"] for s in samples["init"]) / 1024, 1),
                "bare_rss_mb": round(max(s["maxrss_kb"] for s in samples["bare"]) / 1024, 1),
                "libraries": named["bare"],
                "libraries_lazy": sorted(set(named["bare"]) - set(named["bare_module_level"])),
                "imported_beyond_libraries": extra,
            }
        )
    return {"repeats": repeats, "results": rows}
