"""The Lambda base image sam local runs the functions in.

AWS's own (``public.ecr.aws/lambda/python:<version>-x86_64``) wherever its
registry answers. Where it does not, a stand-in built here with what this
machine can reach: a Debian root filesystem (debootstrap) with the release's
Python, the runtime interface client and the AWS SDK from PyPI under
/var/runtime, and the runtime interface emulator that ships inside the
aws-sam-cli package, laid out as AWS's image is (entrypoint, /var/task,
/var/runtime/bootstrap). sam local is given it with ``--invoke-image``.

The stand-in is kept in Docker's image store, labelled with a digest of
everything it is built from, and built again only when that changes.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from scripts.sam_local.commands import Commands, ensure_installed, is_root
from scripts.sam_local.docker_host import DockerHost
from scripts.sam_local.progress import Unavailable

STANDIN_DIR = Path(__file__).parent / "standin"
STANDIN_REPOSITORY = "seckill/lambda-python-standin"
INPUTS_LABEL = "org.seckill.sam-local.standin-inputs"
# The Debian release whose python3.X matches the Lambda runtime's minor version.
DEBIAN_RELEASES = {"3.11": "bookworm"}
DEBIAN_PACKAGES = ["python3.{minor}", "ca-certificates", "tzdata"]
DEFAULT_MIRROR = "http://deb.debian.org/debian"


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


def inputs_digest(release: str, packages: list[str], rie: Path) -> str:
    digest = hashlib.sha256()
    digest.update(f"{release}\n{' '.join(packages)}\n".encode())
    for path in sorted(STANDIN_DIR.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(rie.read_bytes())
    return digest.hexdigest()[:16]


def standin(docker: DockerHost, commands: Commands, sam: Path, python: str, mirror: str | None, why: str) -> BaseImage:
    release = DEBIAN_RELEASES.get(python)
    if release is None:
        raise Unavailable(f"no stand-in for python{python}: no Debian release here ships it; {why}")
    packages = [p.format(minor=python.split(".")[1]) for p in DEBIAN_PACKAGES]
    rie = sam_rie(sam)
    digest = inputs_digest(release, packages, rie)
    image = f"{STANDIN_REPOSITORY}:{python}-x86_64"
    cached = docker.inspect_image(image)
    if cached is not None and (cached["Config"].get("Labels") or {}).get(INPUTS_LABEL) == digest:
        return BaseImage(image, f"stand-in {image} (cached, inputs {digest})", why)
    if not is_root():
        raise Unavailable(f"building the stand-in base image needs root (debootstrap); {why}")
    ensure_installed(commands, {"debootstrap": "debootstrap"})
    build(commands, image, release, packages, rie, digest, mirror or apt_mirror())
    if cached is not None:
        # The stand-in built from older inputs, untagged now (kept if something still uses it).
        commands.run(["docker", "rmi", cached["Id"]], "docker-rmi", timeout=120, check=False)
    return BaseImage(image, f"stand-in {image} (built now from Debian {release} and PyPI, inputs {digest})", why)


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
    commands: Commands, image: str, release: str, packages: list[str], rie: Path, digest: str, mirror: str
) -> None:
    work = Path(tempfile.mkdtemp(prefix="seckill-standin-"))
    root = work / "rootfs"
    try:
        commands.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", release, str(root), mirror],
            "debootstrap",
            timeout=900,
        )
        runtime = root / "var" / "runtime"
        python = packages[0].removeprefix("python")
        commands.run(
            [
                sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                "--target", str(runtime), "--only-binary=:all:", "--implementation", "cp",
                "--platform", "manylinux2014_x86_64", "--python-version", python,
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
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
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
