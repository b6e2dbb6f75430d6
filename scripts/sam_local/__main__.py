"""``make sam-local`` (``python -m scripts.sam_local``): the real SAM CLI against template.yaml."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from types import FrameType

from scripts.sam_local import base_image
from scripts.sam_local.checks import Scenario
from scripts.sam_local.commands import Commands
from scripts.sam_local.docker_host import DockerHost, Relays
from scripts.sam_local.endpoint_sale import PRESSES, STOCK, USERS, EndpointSale
from scripts.sam_local.progress import CheckFailed, Progress, Unavailable, warn
from scripts.sam_local.sam import SamCli
from scripts.sam_local.sandbox import Sandbox
from seckill.infra.config import Settings
from seckill_local.checkout import ROOT
from seckill_local.sqs import LOCAL_AWS
from seckill_local.template import Template

LOG_DIR = ROOT / ".aws-sam" / "sam-local"
EPILOG = """\
Linux. As root on Debian it installs docker.io, socat and debootstrap with
apt-get when missing, starts dockerd when none runs (and stops it at the end),
and builds the stand-in base image where AWS's registry is unreachable. Needs
Redis and MySQL on 127.0.0.1 (make services).

exit codes: 0 every check passed; 1 a check failed; 2 something the run needs
is missing or could not start; 130 interrupted. The commands' output is kept
in .aws-sam/sam-local/ for the last run.
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.sam_local",
        description=(
            "The real SAM CLI against template.yaml: sam build, sam local invoke of every function with its "
            "events/ file, then sam local start-api, and seckill-flash-sale --endpoint against it (tokens from sam "
            "local start-lambda); each answer and its effect in Redis, MySQL and SQS checked, "
            "against the local Redis and MySQL and a moto server, under names of the run's own, removed at the end."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--sam",
        type=Path,
        default=ROOT / ".venv-sam" / "bin" / "sam",
        help="the SAM CLI (default: %(default)s, make sam-setup)",
    )
    parser.add_argument(
        "--image",
        choices=["auto", "aws", "standin"],
        default="auto",
        help="the Lambda base image; auto (the default): AWS's where its registry answers, else the stand-in",
    )
    parser.add_argument("--debian-mirror", help="Debian archive for the stand-in (default: the one apt uses)")
    parser.add_argument("--region", default="us-east-1", help="the region sam local names (default %(default)s)")
    return parser.parse_args(argv)


def _terminate(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (CI's timeout, kill) unwinds like Ctrl-C, so the cleanup runs.
    raise KeyboardInterrupt


class Cleanup:
    """Undo steps, run last-in first-out; each one runs even when another fails."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, Callable[[], str | None]]] = []

    def add(self, name: str, undo: Callable[[], str | None]) -> None:
        self.steps.append((name, undo))

    def run(self, progress: Progress) -> bool:
        clean = True
        while self.steps:
            name, undo = self.steps.pop()
            try:
                said = undo()
                if said:
                    progress.detail(said)
            except Exception as exc:
                clean = False
                warn(f"cleanup: {name} failed: {type(exc).__name__}: {exc}")
        return clean


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.chdir(ROOT)
    signal.signal(signal.SIGTERM, _terminate)
    shutil.rmtree(LOG_DIR, ignore_errors=True)
    LOG_DIR.mkdir(parents=True)
    progress = Progress(total=9)
    commands = Commands(LOG_DIR, {**os.environ, **LOCAL_AWS, "SAM_CLI_TELEMETRY": "0"})
    cleanup = Cleanup()
    image = "(not chosen)"
    progress.say("sam-local: the real SAM CLI against template.yaml, on Docker")
    try:
        image = run(args, progress, commands, cleanup)
        code = 0
    except CheckFailed as exc:
        progress.say(f"FAILED: {exc}")
        code = 1
    except Unavailable as exc:
        progress.say(f"cannot run: {exc}")
        code = 2
    except KeyboardInterrupt:
        progress.say("interrupted")
        code = 130
    except Exception:
        traceback.print_exc()
        code = 1
    progress.number = progress.total - 1
    with progress.step("cleanup: nothing the run started is left running"):
        if not cleanup.run(progress):
            code = code or 2
    progress.say(f"{'PASS' if code == 0 else 'FAIL'} in {progress.elapsed()}; base image: {image}")
    if code:
        progress.say(f"the commands' output: {LOG_DIR}")
    progress.say(f"sam-local: {progress.checks} passed, {0 if code == 0 else 1} failed")
    return code


def run(args: argparse.Namespace, progress: Progress, commands: Commands, cleanup: Cleanup) -> str:
    if not args.sam.exists():
        raise Unavailable(f"no SAM CLI at {args.sam}: make sam-setup")
    sam = SamCli(args.sam, commands, args.region)
    template = Template.load()
    python = str(template.data["Globals"]["Function"]["Runtime"]).removeprefix("python")

    with progress.step(f"sam build ({sam.version()})"):
        sam.build()

    docker = DockerHost(commands, LOG_DIR)
    with progress.step("Docker engine"):
        cleanup.add("dockerd", lambda: "dockerd stopped" if docker.stop() else None)
        progress.detail(docker.start())
        # Whatever sam local leaves behind: an interrupted invoke, start-api's warm containers,
        # and the function images it replaced (removed after the containers).
        images, containers = docker.dangling_images(), docker.sam_containers()
        cleanup.add("images", lambda: docker.remove_images(docker.dangling_images() - images))
        cleanup.add("containers", lambda: docker.remove_containers(docker.sam_containers() - containers))

    with progress.step(f"Lambda base image for python{python}"):
        chosen = base_image.choose(docker, commands, args.sam, python, args.image, args.debian_mirror)
        progress.detail(f"using {chosen.summary}: {chosen.why}")

    with progress.step("local services under the run's own names, reachable from the containers"):
        box = Sandbox(Settings.from_env(), template)
        for name, undo in box.undo_steps():
            cleanup.add(name, undo)
        box.check_services()
        box.create_db_user()
        box.start_moto()
        # The SAM CLI asks STS for the account id before every invoke: moto answers at once.
        commands.env["AWS_ENDPOINT_URL_STS"] = box.sqs_endpoint
        gateway = docker.gateway()
        relays = Relays(commands, LOG_DIR, gateway)
        cleanup.add("relays", lambda: f"{relays.stop()} relays stopped")
        ports = {
            "redis_port": relays.add("redis", box.redis_port),
            "mysql_port": relays.add("mysql", box.admin.port),
            "sqs_port": relays.add("moto", box.moto_port),
        }
        reply_port = box.listen_for_replies(gateway)
        shipped = json.loads((ROOT / "events" / "env.docker.json").read_text(encoding="utf-8"))
        env_file = LOG_DIR / "env.docker.json"
        env_file.write_text(json.dumps(box.env_vars(shipped, **ports), indent=2), encoding="utf-8")
        sam.use(env_file, chosen.invoke_image)
        progress.detail(
            f"MySQL: database {box.db_name} and user {box.db_user} (granted only on it); Redis db {box.redis_db}"
        )
        progress.detail(f"SQS and STS: moto at {box.sqs_endpoint}, queues {box.queue_prefix}<LogicalId>")
        progress.detail(
            f"relays on {gateway} (host.docker.internal): Redis :{ports['redis_port']}, MySQL :{ports['mysql_port']}, "
            f"moto :{ports['sqs_port']}; env-vars: events/env.docker.json with these put in ({env_file})"
        )

    scenario = Scenario(
        sam, box, docker, progress, LOG_DIR, f"http://host.docker.internal:{reply_port}/cloudformation-reply"
    )
    with progress.step("sam local invoke: every function with its events/ file"):
        scenario.invokes_before_the_api()
    with ExitStack() as serving:
        with progress.step("sam local start-api: a press, a status read, a press without a token"):
            api = serving.enter_context(scenario.serving(LOG_DIR / "start-api.log"))
            scenario.api_calls(api)
        with progress.step(
            f"seckill-flash-sale --endpoint (sam local start-api) --stack-name (moto): "
            f"{USERS} users x {PRESSES} presses, stock {STOCK}"
        ):
            EndpointSale(sam, box, docker, progress, LOG_DIR, template).run(api)
    with progress.step("sam local invoke: the admin stops the sale, the stack is deleted"):
        scenario.invokes_after_the_api()
    return chosen.summary


if __name__ == "__main__":
    sys.exit(main())
