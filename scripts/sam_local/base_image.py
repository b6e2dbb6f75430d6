"""The Lambda base image sam local runs the functions in.

AWS's own (``public.ecr.aws/lambda/python:<version>-x86_64``) wherever its
registry answers. Where it does not, a stand-in built here from what this
machine has and can reach, laid out as AWS's image is, and given to sam local
with ``--invoke-image``:

- a root filesystem of this machine's Debian release (debootstrap, minbase),
  with CA certificates, time zones and the shared libraries the interpreter
  links to;
- the runtime's Python under /var/lang, as in AWS's image: the same CPython
  that compiles the layer's bytecode (``make -C layers runtime-python``;
  Debian ships no python3.12), without the packages installed into it here;
- the runtime interface client and the AWS SDK from PyPI under /var/runtime,
  with a /var/runtime/bootstrap that starts the handler as Lambda does;
- the runtime interface emulator that ships inside the aws-sam-cli package,
  and AWS's entrypoint, working directory and variables.

It is kept in Docker's image store, labelled with a digest of everything it is
built from, and built again only when that changes.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scripts.sam_local.commands import Commands, ensure_installed, is_root, tail
from scripts.sam_local.docker_host import DockerHost
from scripts.sam_local.progress import Unavailable

STANDIN_DIR = Path(__file__).parent / "standin"
STANDIN_REPOSITORY = "seckill/lambda-python-standin"
INPUTS_LABEL = "org.seckill.sam-local.standin-inputs"
BASE_PACKAGES = ["ca-certificates", "tzdata"]
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Parts of the interpreter's installation a function never uses (the test suite alone is
# most of it), and its site-packages: what was installed into it here is not the runtime's.
NOT_COPIED = (
    "test",
    "idlelib",
    "tkinter",
    "_tkinter*",
    "turtledemo",
    "ensurepip",
    "include",
    "share",
    "pkgconfig",
    "*.a",
)


@dataclass(frozen=True)
class BaseImage:
    invoke_image: str | None  # for --invoke-image; None: SAM's default (AWS's image)
    summary: str  # which image, in a few words
    why: str


def aws_image(python: str) -> str:
    return f"public.ecr.aws/lambda/python:{python}-x86_64"


def choose(docker: DockerHost, commands: Commands, sam: Path, python: str, which: str, mirror: str | None) -> BaseImage:
    """``which``: "auto" (AWS's where its registry answers, else the stand-in), "aws" or "standin"."""
    if which in {"auto", "aws"}:
        image = aws_image(python)
        pulled = commands.run(["docker", "pull", image], "docker-pull", timeout=600, check=False)
        if pulled.returncode == 0:
            return BaseImage(None, f"AWS's {image} (pulled)", "its registry answered")
        if docker.inspect_image(image) is not None:
            return BaseImage(None, f"AWS's {image} (the copy already here)", "its registry did not answer")
        reason = (pulled.stderr.strip().splitlines() or ["no answer"])[-1]
        if which == "aws":
            raise Unavailable(f"AWS's image {image} cannot be pulled: {reason}")
        return standin(docker, commands, sam, python, mirror, f"AWS's registry is unreachable ({reason})")
    return standin(docker, commands, sam, python, mirror, "asked for with --image standin")


@dataclass(frozen=True)
class RuntimePython:
    executable: Path
    version: str  # 3.12.1
    prefix: Path  # its installation, copied to /var/lang


def runtime_python(commands: Commands, python: str) -> RuntimePython:
    """The CPython of the runtime's version that layers/Makefile compiles the layer's bytecode with."""
    found = commands.run(["make", "-s", "-C", "layers", "runtime-python"], "runtime-python", timeout=60, check=False)
    if found.returncode != 0:
        raise Unavailable(f"no Python {python} on this machine for the stand-in: {tail(found.stderr, 2)}")
    executable = Path(found.stdout.strip().splitlines()[-1])
    asked = [str(executable), "-c", "import json, sys; print(json.dumps([sys.version.split()[0], sys.base_prefix]))"]
    version, prefix = json.loads(commands.run(asked, "runtime-python-info", timeout=60).stdout)
    if not version.startswith(f"{python}."):
        raise Unavailable(f"{executable} is Python {version}, the template's runtime is python{python}")
    if prefix == "/usr":
        raise Unavailable(f"{executable} is the system's Python; the stand-in copies one installed apart (pyenv's)")
    return RuntimePython(executable, version, Path(prefix))


def library_packages(commands: Commands, python: RuntimePython) -> list[str]:
    """The Debian packages of the shared libraries the interpreter and its extension modules link to."""
    modules = [m for m in python.prefix.glob("lib/python*/lib-dynload/*.so") if not _skipped(m.name)]
    elves = [python.executable, *python.prefix.glob("lib/libpython*.so*"), *modules]
    linked = commands.run(["ldd", *map(str, elves)], "ldd", timeout=60, check=False).stdout
    paths = {p for p in re.findall(r"=> (/\S+)", linked) if not p.startswith(str(python.prefix))}
    # dpkg records a library under /lib or /usr/lib, whichever its package ships (merged /usr).
    candidates = sorted(
        {
            q
            for p in paths
            for q in (p, os.path.realpath(p), re.sub(r"^/usr/lib/", "/lib/", p), re.sub(r"^/lib/", "/usr/lib/", p))
        }
    )
    owners = commands.run(["dpkg", "-S", *candidates], "dpkg-owners", timeout=60, check=False).stdout
    return sorted({line.split(":", 1)[0] for line in owners.splitlines() if ": /" in line})


def host_release() -> str:
    fields = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    if fields.get("ID") != "debian" or not fields.get("VERSION_CODENAME"):
        raise Unavailable("the stand-in is built with debootstrap from Debian's archive, on a Debian machine")
    return fields["VERSION_CODENAME"].strip('"')


def inputs_digest(release: str, packages: list[str], python: RuntimePython, rie: Path) -> str:
    digest = hashlib.sha256()
    digest.update(f"{release}\n{' '.join(packages)}\n{python.version} {python.prefix}\n".encode())
    for path in sorted(STANDIN_DIR.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(rie.read_bytes())
    return digest.hexdigest()[:16]


def standin(docker: DockerHost, commands: Commands, sam: Path, python: str, mirror: str | None, why: str) -> BaseImage:
    release = host_release()
    interpreter = runtime_python(commands, python)
    packages = sorted({*BASE_PACKAGES, *library_packages(commands, interpreter)})
    rie = sam_rie(sam)
    digest = inputs_digest(release, packages, interpreter, rie)
    image = f"{STANDIN_REPOSITORY}:{python}-x86_64"
    cached = docker.inspect_image(image)
    if cached is not None and (cached["Config"].get("Labels") or {}).get(INPUTS_LABEL) == digest:
        return BaseImage(image, f"stand-in {image} (cached, inputs {digest})", why)
    if not is_root():
        raise Unavailable(f"building the stand-in base image needs root (debootstrap); {why}")
    ensure_installed(commands, {"debootstrap": "debootstrap"})
    build(commands, image, release, packages, interpreter, rie, digest, mirror or apt_mirror())
    if cached is not None:
        # The stand-in built from older inputs, untagged now (kept if something still uses it).
        commands.run(["docker", "rmi", cached["Id"]], "docker-rmi", timeout=120, check=False)
    made = f"Debian {release}, Python {interpreter.version} from {interpreter.prefix}, PyPI"
    return BaseImage(image, f"stand-in {image} (built now: {made}; inputs {digest})", why)


def sam_rie(sam: Path) -> Path:
    """The emulator binary inside the aws-sam-cli package that ``sam`` runs from."""
    first = sam.read_bytes().split(b"\n", 1)[0].decode(errors="replace")
    interpreter = Path(first.removeprefix("#!").strip())
    found = sorted(
        interpreter.parent.parent.glob("lib/python3*/site-packages/samcli/local/rapid/aws-lambda-rie-x86_64")
    )
    if not first.startswith("#!") or not found:
        raise Unavailable(f"the runtime interface emulator of the SAM CLI at {sam} was not found")
    return found[0]


def apt_mirror() -> str:
    """The Debian archive apt already uses on this machine (deb822 or one-line sources)."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for uri in re.findall(r"^\s*(?:URIs:|deb)\s+(\S+)", text, flags=re.MULTILINE):
            if uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/")
    return DEFAULT_MIRROR


def build(
    commands: Commands,
    image: str,
    release: str,
    packages: list[str],
    python: RuntimePython,
    rie: Path,
    digest: str,
    mirror: str,
) -> None:
    work = Path(tempfile.mkdtemp(prefix="seckill-standin-"))
    root = work / "rootfs"
    try:
        commands.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", release, str(root), mirror],
            "debootstrap",
            timeout=900,
        )
        shutil.copytree(python.prefix, root / "var" / "lang", symlinks=True, ignore=_not_copied(python.prefix))
        runtime = root / "var" / "runtime"
        commands.run(
            [
                sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                "--target", str(runtime), "--only-binary=:all:", "--implementation", "cp",
                "--platform", "manylinux2014_x86_64", "--python-version", python.version,
                "--requirement", str(STANDIN_DIR / "requirements.txt"),
            ],
            "pip-runtime",
            timeout=600,
        )  # fmt: skip
        shutil.copy2(STANDIN_DIR / "bootstrap", runtime / "bootstrap")
        shutil.copy2(STANDIN_DIR / "lambda-entrypoint.sh", root / "lambda-entrypoint.sh")
        shutil.copy2(rie, root / "usr" / "local" / "bin" / "aws-lambda-rie")
        (root / "usr" / "local" / "bin" / "aws-lambda-rie").chmod(0o755)
        for path in ("var/task", "opt"):
            (root / path).mkdir(parents=True, exist_ok=True)
        # What debootstrap downloaded is not part of the runtime.
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (root / cache).glob("*"):
                if entry.is_file():
                    entry.unlink()
        changes = [
            'ENTRYPOINT ["/lambda-entrypoint.sh"]',
            "WORKDIR /var/task",
            "ENV LAMBDA_TASK_ROOT=/var/task",
            "ENV LAMBDA_RUNTIME_DIR=/var/runtime",
            "ENV LANG=C.UTF-8",
            "ENV TZ=:/etc/localtime",
            "ENV PATH=/var/lang/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            # Where AWS's image has it too; the interpreter's own run path named its old place.
            "ENV LD_LIBRARY_PATH=/var/lang/lib",
            f"LABEL {INPUTS_LABEL}={digest}",
        ]
        args = ["docker", "import"]
        for change in changes:
            args += ["--change", change]
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-cf", "-", "."], stdout=subprocess.PIPE)
        try:
            imported = subprocess.run(
                [*args, "-", image], stdin=tar.stdout, capture_output=True, text=True, timeout=600, check=False
            )
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait(timeout=60)
        if imported.returncode != 0 or tar.returncode != 0:
            raise Unavailable(f"docker import of the stand-in failed: {imported.stderr.strip()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _skipped(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in NOT_COPIED)


def _not_copied(prefix: Path) -> Callable[[str, list[str]], set[str]]:
    site_packages = {str(p) for p in prefix.glob("lib/python*/site-packages")}

    def ignore(directory: str, names: list[str]) -> set[str]:
        if directory in site_packages:
            return set(names)
        return {name for name in names if _skipped(name)}

    return ignore
