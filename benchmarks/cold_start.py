"""(5) Cold start: each function's ``import app`` in a fresh process against a bare
import of just the libraries its code imports, and peak memory.

"The libraries it uses" are read from the source, not guessed: every module-level
``import`` of the function's ``app.py`` and, following ``seckill.*`` imports, of
every layer module it reaches, minus the project's own modules. The bare import
imports exactly those (the same dotted names); the difference is what the
function's own initialisation costs (clients built at import, Powertools objects,
what they pull in). Each child times only its imports (the interpreter's own
start is not counted) and reports its peak RSS (``ru_maxrss``); the two kinds
alternate, and the median is kept. The layer is on ``PYTHONPATH`` as Lambda puts
it on ``sys.path``; the environment is the function's, as in every benchmark.
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

from benchmarks.stack import StackInfo, function_env
from seckill_local.template import ROOT, Template

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


def _module_imports(path: Path) -> list[tuple[str, list[str]]]:
    """Module-level imports of a file: (module, names imported from it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, list[str]]] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module != "__future__":
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def libraries(app: Path) -> list[str]:
    """Every non-project module imported at module level by app.py and the layer modules it reaches."""
    seen: set[Path] = set()
    external: set[str] = set()
    todo = [app]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module, names in _module_imports(path):
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
        libs = libraries(app)
        env = {**os.environ, **function_env(info, logical_id, template), "PYTHONPATH": str(LAYER)}
        codes = {
            "init": _CHILD.format(imports=f"sys.path.insert(0, {str(fn.code_uri)!r})\nimport {module}"),
            "bare": _CHILD.format(imports="\n".join(f"import {lib}" for lib in libs)),
        }
        progress(f"cold start: {logical_id} ({repeats} x 2 fresh processes)")
        samples: dict[str, list[dict[str, Any]]] = {"init": [], "bare": []}
        _child(codes["init"], env, fn.code_uri)  # byte-code caches written: both kinds read compiled modules
        for r in range(repeats):
            for kind in ("init", "bare") if r % 2 == 0 else ("bare", "init"):
                samples[kind].append(_child(codes[kind], env, fn.code_uri))
        init = statistics.median(s["seconds"] for s in samples["init"]) * 1e3
        bare = statistics.median(s["seconds"] for s in samples["bare"]) * 1e3
        extra = sorted(set(samples["init"][0]["modules"]) - set(samples["bare"][0]["modules"]) - {module, FIRST_PARTY})
        rows.append(
            {
                "function": logical_id,
                "init_ms": round(init, 1),
                "bare_imports_ms": round(bare, 1),
                "ratio": round(init / bare, 3) if bare else None,
                "init_rss_mb": round(max(s["maxrss_kb"] for s in samples["init"]) / 1024, 1),
                "bare_rss_mb": round(max(s["maxrss_kb"] for s in samples["bare"]) / 1024, 1),
                "libraries": libs,
                "imported_beyond_libraries": extra,
            }
        )
    return {"repeats": repeats, "results": rows}
