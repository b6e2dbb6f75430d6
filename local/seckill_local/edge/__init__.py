"""The edge on this machine: ``server.mjs`` on Node.js applies the edge stack's
EdgeDistribution in front of the local API (its cache behaviors' allowed methods and
viewer-request functions: ``edge/press.js`` on the press, EdgeDenyFunction on the routes
the edge does not serve) and hosts an in-memory stand-in of the KeyValueStore, which the
publisher writes with the ``cloudfront-keyvaluestore`` API.

    with EdgeServer(upstream="http://127.0.0.1:3000") as edge:
        edge.url           # the viewer side: what CloudFront's domain would be
        edge.kvs_endpoint  # the store's listener
        edge.environment() # what a function needs to write the store with boto3

boto3 sends every call of that API to ``<the ARN's account>.<the endpoint's host>``
(its endpoint rules put the account first, even before a custom endpoint), a name
that resolves to nothing locally. So the client is given a name of its own
(``KVS_ENDPOINT``) and the store's listener as its HTTP proxy: the listener serves the
requests a proxy receives as it serves direct ones.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from seckill_local.checkout import ROOT
from seckill_local.edge_function_command import RESOURCE, SOURCE
from seckill_local.node import MISSING, node
from seckill_local.processes import stop_group
from seckill_local.sqs import LOCAL_AWS
from seckill_local.template import Template

SERVER = Path(__file__).resolve().parent / "server.mjs"
# The nested stack (template.yaml's AWS::Serverless::Application) that holds the distribution.
EDGE_STACK = "EdgeStack"
DISTRIBUTION = "EdgeDistribution"
# The one store of a local run; its account is no one's.
KVS_ARN = "arn:aws:cloudfront::000000000000:key-value-store/seckill-local"
# The name the client is configured with; .test is reserved for testing (RFC 2606).
KVS_ENDPOINT = "http://cloudfront-kvs.seckill.test"
# The page bucket's contents: its keys are the paths under edge/ (page/index.html is
# edge/page/index.html), which `aws s3 sync edge/page s3://<bucket>/page/` copies.
BUCKET = ROOT / "edge"
# The buyer's page on the edge, for one voucher of one shop (docs/page.md).
PAGE = "/page/index.html"
READY = re.compile(r"edge listening on (http://\S+) \(kvs (http://\S+)\)")


@dataclass(frozen=True)
class EdgeStats:
    """Presses the function answered itself, requests it forwarded to the API, and
    requests it threw on (answered 503, as CloudFront does)."""

    answered: int
    forwarded: int
    failed: int


def distribution(template: Template) -> dict[str, Any]:
    """The edge stack's EdgeDistribution as ``server.mjs`` applies it: its cache behaviors in
    order, the default last with the pattern ``*``, each with its allowed methods and the
    logical id of its viewer-request function (or None), and every such function's code.
    EdgePressFunction's code is ``edge/press.js``, which the edge template's copies
    (``seckill-edge-function``), so that an edit runs locally before it is copied.
    A behavior whose origin is an S3 bucket serves files from ``BUCKET`` instead of the
    API (``static``), and one with a response headers policy adds its headers (``headers``)."""
    template = template.nested[EDGE_STACK]
    config = template.resource(DISTRIBUTION)["Properties"]["DistributionConfig"]
    buckets = {origin["Id"] for origin in config["Origins"] if "S3OriginConfig" in origin}
    behaviors, functions = [], {}
    for behavior in [*config.get("CacheBehaviors", []), {**config["DefaultCacheBehavior"], "PathPattern": "*"}]:
        function = None
        for association in behavior.get("FunctionAssociations", []):
            if association["EventType"] == "viewer-request":
                function = association["FunctionARN"]["Fn::GetAtt"][0]
        if function is not None and function not in functions:
            code = template.resource(function)["Properties"]["FunctionCode"]
            functions[function] = SOURCE.read_text(encoding="utf-8") if function == RESOURCE else code
        policy = behavior.get("ResponseHeadersPolicyId")
        behaviors.append(
            {
                "pathPattern": behavior["PathPattern"],
                "allowedMethods": behavior["AllowedMethods"],
                "function": function,
                "static": str(BUCKET) if behavior["TargetOriginId"] in buckets else None,
                "headers": response_headers(template.resource(policy["Ref"])) if policy else {},
            }
        )
    return {"behaviors": behaviors, "functions": functions}


def response_headers(policy: dict[str, Any]) -> dict[str, str]:
    """The headers an AWS::CloudFront::ResponseHeadersPolicy adds to every response: its
    security headers (the names CloudFront gives them) and its custom headers."""
    config = policy["Properties"]["ResponseHeadersPolicyConfig"]
    security = config.get("SecurityHeadersConfig", {})
    headers = {}
    if "ContentSecurityPolicy" in security:
        headers["content-security-policy"] = security["ContentSecurityPolicy"]["ContentSecurityPolicy"]
    if "ContentTypeOptions" in security:
        headers["x-content-type-options"] = "nosniff"
    if "FrameOptions" in security:
        headers["x-frame-options"] = security["FrameOptions"]["FrameOption"]
    if "ReferrerPolicy" in security:
        headers["referrer-policy"] = security["ReferrerPolicy"]["ReferrerPolicy"]
    if "StrictTransportSecurity" in security:
        hsts = security["StrictTransportSecurity"]
        flags = [("IncludeSubdomains", "includeSubDomains"), ("Preload", "preload")]
        headers["strict-transport-security"] = "; ".join(
            [f"max-age={hsts['AccessControlMaxAgeSec']}", *(text for key, text in flags if hsts.get(key))]
        )
    for item in config.get("CustomHeadersConfig", {}).get("Items", []):
        headers[item["Header"].lower()] = item["Value"]
    return headers


class EdgeServer:
    """``server.mjs`` as a child process, stopped with the context (or ``stop()``), applying
    ``template``'s distribution (the checkout's by default)."""

    def __init__(
        self,
        upstream: str,
        *,
        port: int = 0,
        kvs_port: int = 0,
        host: str = "127.0.0.1",
        template: Template | None = None,
        origin_secret: str = "",
    ) -> None:
        path = node()
        if path is None:
            raise RuntimeError(MISSING)
        self.kvs_arn = KVS_ARN
        config = json.dumps(distribution(template or Template.load()))
        command = [
            str(path),
            str(SERVER),
            *("--distribution", config, "--upstream", upstream, "--kvs-arn", KVS_ARN),
            *("--host", host, "--port", str(port), "--kvs-port", str(kvs_port), "--exit-with-stdin"),
        ]
        # Our own script with our own arguments. Its stdin is a pipe only we hold: if this
        # process dies, however, the pipe closes and the server exits.
        # The origin header's secret (seckill.origin) in the environment, not on the command line.
        env = {**os.environ, "SECKILL_ORIGIN_SECRET": origin_secret}
        self.process = subprocess.Popen(  # noqa: S603
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True, env=env
        )
        self.url, self.kvs_endpoint = self._wait_ready()

    def _wait_ready(self, timeout: float = 30) -> tuple[str, str]:
        lines: queue.Queue[str] = queue.Queue()
        assert self.process.stdout is not None
        stdout = self.process.stdout

        def read() -> None:
            # Past the ready line the server prints nothing; reading on keeps its pipe open.
            for line in stdout:
                lines.put(line)
            lines.put("")

        threading.Thread(target=read, daemon=True).start()
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            raise RuntimeError(f"the edge server did not come up within {timeout:.0f} s") from None
        found = READY.search(line)
        if found is None:
            code = self.process.wait(timeout=5) if not line else None
            self.stop()
            raise RuntimeError(f"the edge server did not start (exit code {code}, said {line.strip()!r})")
        return found[1], found[2]

    def stats(self) -> EdgeStats:
        with urllib.request.urlopen(f"{self.kvs_endpoint}/__edge/stats", timeout=10) as answer:  # noqa: S310
            counts = json.load(answer)
        return EdgeStats(answered=counts["answered"], forwarded=counts["forwarded"], failed=counts["failed"])

    def environment(self) -> dict[str, str]:
        """What EdgePublisherFunction needs to write this server's store."""
        return kvs_environment(self.kvs_endpoint, self.kvs_arn)

    def stop(self) -> None:
        stop_group(self.process)

    def __enter__(self) -> EdgeServer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def page_url(edge_url: str, shop_id: int | str, voucher_id: int | str) -> str:
    """The buyer's page for a voucher, on the edge at ``edge_url``."""
    return f"{edge_url}{PAGE}?shop={shop_id}&voucher={voucher_id}"


def kvs_environment(listener: str, kvs_arn: str = KVS_ARN) -> dict[str, str]:
    """The environment under which a plain ``boto3.client("cloudfront-keyvaluestore")``
    writes the local store listening at ``listener``; other local endpoints stay direct."""
    # Both spellings: where both are set, the lower-case one wins (urllib's getproxies).
    proxies = {"http_proxy": listener, "no_proxy": "127.0.0.1,localhost"}
    return {
        "EDGE_KVS_ARN": kvs_arn,
        "AWS_ENDPOINT_URL_CLOUDFRONT_KEYVALUESTORE": KVS_ENDPOINT,
        **proxies,
        **{name.upper(): value for name, value in proxies.items()},
    }


def local_kvs_client(listener: str) -> Any:
    """A ``cloudfront-keyvaluestore`` client on the local store listening at ``listener``
    (through it as a proxy, as for the publisher), for a reader or another writer. The
    store takes any signature; one attempt per call, so a test sees each answer."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "cloudfront-keyvaluestore",
        endpoint_url=KVS_ENDPOINT,
        region_name=LOCAL_AWS["AWS_DEFAULT_REGION"],
        aws_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"],
        config=Config(proxies={"http": listener}, retries={"max_attempts": 1}),
    )
