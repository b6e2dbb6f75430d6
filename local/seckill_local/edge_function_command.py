"""``seckill-edge-function``: copy edge/press.js into the edge stack's template
(edge/template.yaml), as the FunctionCode of EdgePressFunction (CloudFormation takes a
CloudFront Function's code inline only), so that the file stays the one place the code
is edited.

  seckill-edge-function            rewrite the template's block from the file
  seckill-edge-function --check    exit 1 if the block is not the file
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from seckill_local.checkout import ROOT, write_or_check

SOURCE = ROOT / "edge" / "press.js"
# The edge's nested stack, which holds the press function.
TEMPLATE = ROOT / "edge" / "template.yaml"
RESOURCE = "EdgePressFunction"
_KEY = re.compile(r"^(?P<indent> +)FunctionCode: \|-?\n$")


def with_function_code(template: str, code: str) -> str:
    """``template`` with EdgePressFunction's ``FunctionCode: |`` block replaced by ``code``.

    The block is a literal scalar: ``|`` keeps the file's one final newline, ``|-``
    stands for none. Other endings (blank last lines) and a first line that starts
    with a space would need YAML indicators this does not write: it refuses them.
    """
    if code.endswith("\n\n") or code.startswith((" ", "\n")):
        raise ValueError("the code must not start with a space or a blank line, nor end with blank lines")
    lines = template.splitlines(keepends=True)
    start = _resource_line(lines, RESOURCE)
    key = next(
        (i for i in range(start + 1, len(lines)) if _KEY.match(lines[i]) or _is_resource(lines[i])),
        len(lines),
    )
    found = _KEY.match(lines[key]) if key < len(lines) else None
    if found is None:
        raise ValueError(f"{RESOURCE} has no `FunctionCode: |` block")
    indent = len(found["indent"])
    end = key + 1
    for i in range(key + 1, len(lines)):
        if lines[i].strip() and len(lines[i]) - len(lines[i].lstrip(" ")) <= indent:
            break
        if lines[i].strip():
            end = i + 1  # trailing blank lines separate the next key; they are not the code's
    chomp = "" if code.endswith("\n") else "-"
    body = [f"{' ' * (indent + 2)}{line}\n" if line else "\n" for line in code.splitlines()]
    head = f"{' ' * indent}FunctionCode: |{chomp}\n"
    return "".join([*lines[:key], head, *body, *lines[end:]])


def _resource_line(lines: list[str], resource: str) -> int:
    for i, line in enumerate(lines):
        if line.rstrip("\n") == f"  {resource}:":
            return i
    raise ValueError(f"no resource {resource} in the template")


def _is_resource(line: str) -> bool:
    """A line that starts another resource (or another top-level section)."""
    return bool(re.match(r"^ {0,2}[A-Za-z]", line))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="seckill-edge-function",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--template", type=Path, default=TEMPLATE, help="the template (default %(default)s)")
    parser.add_argument("--source", type=Path, default=SOURCE, help="the function's code (default %(default)s)")
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 if they differ")
    args = parser.parse_args(argv)
    wanted = with_function_code(args.template.read_text(encoding="utf-8"), args.source.read_text(encoding="utf-8"))
    return write_or_check(
        args.template,
        wanted,
        check=args.check,
        stale=f"{args.template}'s {RESOURCE} is not {args.source}: run `make edge-function`",
        current=f"{args.template}'s {RESOURCE} is {args.source}",
        written=f"copied {args.source} into {args.template} ({RESOURCE}.FunctionCode)",
    )


if __name__ == "__main__":
    sys.exit(main())
