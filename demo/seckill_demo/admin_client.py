"""The admin client: the IAM-authorized routes, signed with SigV4 from the
caller's AWS credentials (environment, profile or role, as boto3 finds them)."""

from __future__ import annotations

import json
import re
from typing import Any

import boto3
import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

# https://<api id>.execute-api.<region>.amazonaws.com: the region a signature must name.
EXECUTE_API_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com")


class AdminClient:
    def __init__(self, http: urllib3.PoolManager, api_url: str, session: boto3.Session | None = None) -> None:
        session = session or boto3.Session()
        credentials = session.get_credentials()
        if credentials is None:
            raise RuntimeError("no AWS credentials to sign the admin calls with (environment, profile or role)")
        found = EXECUTE_API_HOST.search(api_url)
        region = found[1] if found else session.region_name or "us-east-1"
        self.signer = SigV4Auth(credentials, "execute-api", region)
        self.http = http
        self.api_url = api_url.rstrip("/")

    def post(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """A signed POST; (status, the JSON answer)."""
        url = f"{self.api_url}{path}"
        data = json.dumps(body) if body is not None else ""
        request = AWSRequest(method="POST", url=url, data=data, headers={"content-type": "application/json"})
        self.signer.add_auth(request)
        response = self.http.request("POST", url, body=data, headers=dict(request.headers))
        return response.status, json.loads(response.data) if response.data else None

    def create_seckill_voucher(self, body: dict[str, Any]) -> int:
        status, answer = self.post("/voucher/seckill", body)
        if status != 201:
            raise RuntimeError(f"creating the voucher failed: {status} {answer}")
        return int(answer["data"])

    def stop(self, voucher_id: int) -> None:
        status, answer = self.post(f"/voucher/seckill/{voucher_id}/stop")
        if status != 200:
            raise RuntimeError(f"stopping voucher {voucher_id} failed: {status} {answer}")
