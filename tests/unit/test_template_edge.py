"""The edge (parameter Edge): template.yaml's state queue and publisher, and its nested
edge stack (edge/template.yaml: the press function, edge/press.js, the distribution, the
store and WAF, edge/waf.yaml) and the sale's dashboard, checked offline as
tests/unit/test_template.py checks the rest. The nested templates are read as the local
runner reads them (Template.nested), with what template.yaml passes them."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from typing import Any

import pytest

from seckill.infra import results
from seckill.press.gate import REFUSALS
from seckill_local import edge_function_command
from seckill_local.checkout import ROOT
from seckill_local.edge_function_command import SOURCE, with_function_code
from seckill_local.template import Template
from tests.unit.test_template import ORIGIN_SECRET, actions, evaluate, statements, transformed

__all__ = ["transformed"]  # the fixture, shared with test_template.py

# The in-VPC functions that change a voucher's state, and so queue it for the edge.
STATE_SENDERS = (
    "SeckillApiFunction",
    "OrderPersisterFunction",
    "OrderExpiryFunction",
    "ReconcilerFunction",
    "DrawClockFunction",
)
EDGE_RESOURCE_TYPES = ("AWS::CloudFront::", "AWS::WAFv2::")
EDGE_STACK = "EdgeStack"  # template.yaml's nested edge/template.yaml
WAF_STACK = "EdgeWebAcl"  # edge/template.yaml's nested edge/waf.yaml
WAF_TEMPLATE = ROOT / "edge" / "waf.yaml"


def stack(transformed: dict[str, Any], **parameters: Any) -> dict[str, dict[str, Any]]:
    """The resources a stack with these parameters has, properties resolved."""
    parameters = {"AWS::Region": "us-east-1", **parameters}
    return {
        name: {**resource, "Properties": evaluate(resource.get("Properties", {}), transformed, parameters)}
        for name, resource in transformed["Resources"].items()
        if "Condition" not in resource or evaluate({"Condition": resource["Condition"]}, transformed, parameters)
    }


def passed(parent: dict[str, Any], application: str, **parameters: Any) -> dict[str, Any]:
    """The parameters ``parent`` (with ``parameters``) gives its nested ``application``;
    the pseudo parameters (the region) carry over, as CloudFormation's do."""
    parameters = {"AWS::Region": "us-east-1", **parameters}
    given = stack(parent, **parameters)[application]["Properties"]["Parameters"]
    return {"AWS::Region": parameters["AWS::Region"], **given}


@pytest.fixture(scope="module")
def edge(template: Template) -> Template:
    """The edge stack's template, as template.yaml names it and the runner loads it."""
    nested = template.nested[EDGE_STACK]
    assert template.resource(EDGE_STACK)["Properties"]["Location"] == "edge/template.yaml"
    return nested


@pytest.fixture(scope="module")
def waf(edge: Template) -> dict[str, Any]:
    assert edge.resource(WAF_STACK)["Properties"]["Location"] == "waf.yaml"
    return edge.nested[WAF_STACK].data


def edge_stack(transformed: dict[str, Any], edge: Template, **parameters: Any) -> dict[str, dict[str, Any]]:
    """The edge stack's resources as template.yaml with ``parameters`` creates it."""
    return stack(edge.data, **passed(transformed, EDGE_STACK, **parameters))


def waf_stack(
    transformed: dict[str, Any], edge: Template, waf: dict[str, Any], **parameters: Any
) -> dict[str, dict[str, Any]]:
    """edge/waf.yaml's resources as the edge stack, created by template.yaml, nests it."""
    return stack(waf, **passed(edge.data, WAF_STACK, **passed(transformed, EDGE_STACK, **parameters)))


def variables(resources: dict[str, dict[str, Any]], logical_id: str) -> dict[str, Any]:
    found: dict[str, Any] = resources[logical_id]["Properties"]["Environment"]["Variables"]
    return found


def role_statements(resources: dict[str, dict[str, Any]], logical_id: str) -> list[dict[str, Any]]:
    role = resources[f"{logical_id}Role"]["Properties"]
    granted = [p for p in role.get("Policies", []) if p != {"Ref": "AWS::NoValue"}]  # an If the stack ruled out
    return [s for policy in granted for s in statements(policy["PolicyDocument"])]


def test_edge_is_on_by_default_and_can_be_left_out(transformed: dict[str, Any]) -> None:
    parameter = transformed["Parameters"]["Edge"]
    assert parameter["Default"] == "cloudfront"
    assert parameter["AllowedValues"] == ["cloudfront", "none"]


def test_without_the_edge_nothing_of_it_is_deployed(transformed: dict[str, Any]) -> None:
    with_edge, without = stack(transformed), stack(transformed, Edge="none")
    edge_only = set(with_edge) - set(without)
    assert {"EdgeStateQueue", "EdgeStateDeadLetterQueue", "EdgePublisherFunction", EDGE_STACK} <= edge_only
    assert with_edge[EDGE_STACK]["Type"] == "AWS::CloudFormation::Stack"
    # CloudFront and WAF live in the edge stack only.
    for name, resource in with_edge.items():
        assert not resource["Type"].startswith(EDGE_RESOURCE_TYPES), name
    # ReconcilerFunction's edge notice: a rule of its SAM schedule, switched off without the edge.
    assert with_edge["ReconcilerFunctionEdgeNotice"]["Properties"]["State"] == "ENABLED"
    assert without.pop("ReconcilerFunctionEdgeNotice")["Properties"]["State"] == "DISABLED"
    without.pop("ReconcilerFunctionEdgeNoticePermission")  # the rule's, to invoke the function
    for name, resource in without.items():
        assert not resource["Type"].startswith(EDGE_RESOURCE_TYPES), name
        assert not name.startswith("Edge"), name
        assert "Edge" not in json.dumps(resource["Properties"]).replace("EDGE_STATE_QUEUE_URL", ""), name
    for logical_id in STATE_SENDERS:
        assert variables(without, logical_id)["EDGE_STATE_QUEUE_URL"] == "", logical_id
        assert variables(with_edge, logical_id)["EDGE_STATE_QUEUE_URL"] == {"Ref": "EdgeStateQueue"}, logical_id
    outputs = transformed["Outputs"]
    for name, output in outputs.items():
        if name.startswith("Edge"):
            assert output["Condition"] == "HasEdge", name


def test_state_senders_may_send_to_the_state_queue_only_with_the_edge(transformed: dict[str, Any]) -> None:
    send = {"Effect": "Allow", "Action": ["sqs:SendMessage*"]}
    queue = {"Fn::Sub": ["arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${queueName}"]}
    with_edge, without = stack(transformed), stack(transformed, Edge="none")
    for logical_id in STATE_SENDERS:
        granted = [s for s in role_statements(with_edge, logical_id) if "EdgeStateQueue" in json.dumps(s)]
        assert len(granted) == 1, logical_id
        assert {k: granted[0][k] for k in send} == send
        assert granted[0]["Resource"]["Fn::Sub"][0] == queue["Fn::Sub"][0]
        assert granted[0]["Resource"]["Fn::Sub"][1] == {"queueName": {"Fn::GetAtt": ["EdgeStateQueue", "QueueName"]}}
        assert "EdgeStateQueue" not in json.dumps(role_statements(without, logical_id)), logical_id
    # Nobody else sends states: the publisher only reads them.
    for name, resource in with_edge.items():
        if resource["Type"] == "AWS::IAM::Role" and name.removesuffix("Role") not in STATE_SENDERS:
            for statement in role_statements(with_edge, name.removesuffix("Role")):
                sends = any(a.startswith("sqs:Send") for a in actions(statement))
                assert not (sends and "EdgeStateQueue" in json.dumps(statement)), name


def test_the_state_queue_redrives_to_its_dead_letter_queue(template: Template) -> None:
    queue = template.resource("EdgeStateQueue")["Properties"]
    dlq = template.resource("EdgeStateDeadLetterQueue")["Properties"]
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["EdgeStateDeadLetterQueue", "Arn"]},
        "maxReceiveCount": 5,
    }
    assert queue["SqsManagedSseEnabled"] is dlq["SqsManagedSseEnabled"] is True
    assert int(dlq["MessageRetentionPeriod"]) > int(queue["MessageRetentionPeriod"])
    publisher = template.functions["EdgePublisherFunction"]
    assert int(queue["VisibilityTimeout"]) >= 6 * publisher.timeout
    (source,) = publisher.sqs_events
    assert source["Queue"] == {"Fn::GetAtt": ["EdgeStateQueue", "Arn"]}
    assert source["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert 1 <= int(source["BatchSize"]) <= 10
    assert int(source["ScalingConfig"]["MaximumConcurrency"]) >= 2  # SQS's minimum


def test_the_publisher_runs_outside_the_vpc_with_the_store_only(transformed: dict[str, Any], edge: Template) -> None:
    resources = stack(transformed)
    function = resources["EdgePublisherFunction"]["Properties"]
    # The KeyValueStore API has no VPC endpoint: no VpcConfig, and no VPC-access policy.
    assert "VpcConfig" not in function
    role = resources["EdgePublisherFunctionRole"]["Properties"]
    assert not any("VPCAccess" in json.dumps(arn) for arn in role["ManagedPolicyArns"])
    # Every other function stays in the VPC.
    for name, resource in resources.items():
        if resource["Type"] == "AWS::Lambda::Function" and name != "EdgePublisherFunction":
            assert "VpcConfig" in resource["Properties"], name
    env = function["Environment"]["Variables"]
    # The edge stack's store, through its output.
    store = {"Fn::GetAtt": [EDGE_STACK, "Outputs.KeyValueStoreArn"]}
    assert edge.data["Outputs"]["KeyValueStoreArn"]["Value"] == {"Fn::GetAtt": ["EdgeKeyValueStore", "Arn"]}
    assert env["EDGE_KVS_ARN"] == store
    assert env["AWS_ENDPOINT_URL_CLOUDFRONT_KEYVALUESTORE"] == {"Ref": "AWS::NoValue"}  # a local knob
    kvs = {s["Sid"]: s for s in role_statements(resources, "EdgePublisherFunction") if "Sid" in s}["WriteEdgeState"]
    assert sorted(actions(kvs)) == [
        "cloudfront-keyvaluestore:DescribeKeyValueStore",
        "cloudfront-keyvaluestore:GetKey",
        "cloudfront-keyvaluestore:ListKeys",
        "cloudfront-keyvaluestore:UpdateKeys",
    ]
    assert kvs["Resource"] == store
    # No other role may touch the store; the publisher touches nothing else but its queue.
    for name, resource in resources.items():
        if resource["Type"] == "AWS::IAM::Role" and name != "EdgePublisherFunctionRole":
            assert "cloudfront-keyvaluestore" not in json.dumps(resource["Properties"]), name
    others = [s for s in role_statements(resources, "EdgePublisherFunction") if s is not kvs]
    # Besides its queue, it reads the pass key ring (copied to `pass-keys`) and reads and
    # writes which keys the edge holds, and no other secret.
    secret = [s for s in others if "secretsmanager" in json.dumps(s)]
    assert [json.dumps(s["Resource"]) for s in secret] == [
        json.dumps({"Fn::Sub": ["${secretArn}", {"secretArn": {"Ref": "PassKeysSecret"}}]}),
        json.dumps({"Ref": "PassKeysHeldSecret"}),
    ]
    assert sorted(actions(secret[1])) == ["secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"]
    assert env["PASS_KEYS_HELD_SECRET_ARN"] == {"Ref": "PassKeysHeldSecret"}
    assert all("EdgeStateQueue" in json.dumps(s["Resource"]) for s in others if s not in secret), others
    assert env["PASS_KEYS_SECRET_ARN"] == {"Ref": "PassKeysSecret"}
    assert env["SECKILL_PASS_KEYS"] == {"Ref": "AWS::NoValue"}  # a local knob


# --- the press function: edge/press.js, inline in the edge stack ----------------------------


def test_the_press_function_is_edge_press_js_byte_for_byte(edge: Template) -> None:
    assert edge_function_command.TEMPLATE == edge_function_command.ROOT / "edge" / "template.yaml"
    function = edge.resource("EdgePressFunction")["Properties"]
    code = SOURCE.read_bytes()
    assert function["FunctionCode"].encode("utf-8") == code, "run `make edge-function`"
    # CloudFront Functions take at most 10 KB of code.
    assert len(code) <= 10 * 1024
    config = function["FunctionConfig"]
    assert config["Runtime"] == "cloudfront-js-2.0"  # the runtime that reads a KeyValueStore
    assert config["KeyValueStoreAssociations"] == [{"KeyValueStoreARN": {"Fn::GetAtt": ["EdgeKeyValueStore", "Arn"]}}]
    assert function["AutoPublish"] is True  # the distribution runs the LIVE stage


SAMPLE = """Resources:
  Other:
    Type: AWS::CloudFront::Function
    Properties:
      FunctionCode: |
        keep me
  EdgePressFunction:
    Type: AWS::CloudFront::Function
    Properties:
      FunctionCode: |-
        old();

        old();
      Name: x

  After:
    Type: AWS::SQS::Queue
"""


@pytest.mark.parametrize(
    "code", ["function handler(event) {\n    return event.request;\n}\n", "a();\n\n\tb();", "one line\n"]
)
def test_the_copy_puts_the_code_in_the_block_and_nothing_else(tmp_path: Path, code: str) -> None:
    rewritten = with_function_code(SAMPLE, code)
    path = tmp_path / "template.yaml"
    path.write_text(rewritten, encoding="utf-8")
    data = Template.load(path).data["Resources"]
    assert data["EdgePressFunction"]["Properties"]["FunctionCode"] == code
    assert data["EdgePressFunction"]["Properties"]["Name"] == "x"
    assert data["Other"]["Properties"]["FunctionCode"] == "keep me\n"
    assert data["After"] == {"Type": "AWS::SQS::Queue"}
    assert with_function_code(rewritten, code) == rewritten


@pytest.mark.parametrize("code", ["  indented first line\n", "\nblank first line\n", "two blank lines at the end\n\n"])
def test_the_copy_refuses_code_a_plain_block_cannot_hold(code: str) -> None:
    with pytest.raises(ValueError, match="must not"):
        with_function_code(SAMPLE, code)


def test_the_check_fails_when_the_template_lags_the_file(tmp_path: Path) -> None:
    template, source = tmp_path / "template.yaml", tmp_path / "press.js"
    template.write_text(SAMPLE, encoding="utf-8")
    source.write_text("new();\n", encoding="utf-8")
    files = ["--template", str(template), "--source", str(source)]
    assert edge_function_command.main([*files, "--check"]) == 1
    assert edge_function_command.main(files) == 0
    assert edge_function_command.main([*files, "--check"]) == 0


# --- the distribution ---------------------------------------------------------------------------

CACHING_DISABLED = "4135ea2d-6df8-44a3-9df3-4b5a84be39ad"
ALL_VIEWER_EXCEPT_HOST_HEADER = "b689b0a8-53d0-40ab-baf2-68738e2966ac"
PRESS = {"Fn::GetAtt": ["EdgePressFunction", "FunctionARN"]}
DENY = {"Fn::GetAtt": ["EdgeDenyFunction", "FunctionARN"]}


def distribution(edge: Template) -> dict[str, Any]:
    config: dict[str, Any] = edge.resource("EdgeDistribution")["Properties"]["DistributionConfig"]
    return config


def behavior_for(config: dict[str, Any], path: str) -> dict[str, Any]:
    """The behavior CloudFront picks: the first pattern that matches (``*`` spans slashes), else the default."""
    for behavior in config["CacheBehaviors"]:
        if fnmatch.fnmatchcase(path, behavior["PathPattern"]):
            return dict(behavior)
    return dict(config["DefaultCacheBehavior"])


def functions_of(behavior: dict[str, Any]) -> list[Any]:
    associations = behavior.get("FunctionAssociations", [])
    assert all(a["EventType"] == "viewer-request" for a in associations)
    return [a["FunctionARN"] for a in associations]


def test_the_origin_is_the_http_api_over_tls_1_2(template: Template, edge: Template) -> None:
    config = distribution(edge)
    (origin,) = [o for o in config["Origins"] if o["Id"] != PAGE_ORIGIN]
    given = template.resource(EDGE_STACK)["Properties"]["Parameters"]
    assert origin["DomainName"] == {"Ref": "OriginDomain"}
    assert given["OriginDomain"] == {"Fn::Sub": "${SeckillHttpApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}"}
    assert origin["CustomOriginConfig"]["OriginProtocolPolicy"] == "https-only"
    assert origin["CustomOriginConfig"]["OriginSSLProtocols"] == ["TLSv1.2"]
    # The origin header, from the secret the authorizer checks (its version a parameter: a rotation).
    (header,) = origin["OriginCustomHeaders"]
    assert header["HeaderName"] == "x-seckill-origin"
    condition, versioned, current = header["HeaderValue"]["Fn::If"]
    assert condition == "HasOriginSecretVersion"
    assert versioned == {
        "Fn::Sub": "{{resolve:secretsmanager:${OriginSecretArn}:SecretString:current::${OriginSecretVersionId}}}"
    }
    assert current == {"Fn::Sub": "{{resolve:secretsmanager:${OriginSecretArn}:SecretString:current}}"}
    # The secret the authorizer checks, and the version the operator sets on template.yaml.
    assert given["OriginSecretArn"] == ORIGIN_SECRET
    assert given["OriginSecretVersionId"] == {"Ref": "OriginSecretVersionId"}
    draw = behavior_for(config, "/voucher/seckill/42/draw")["PathPattern"]
    for behavior in [config["DefaultCacheBehavior"], *config["CacheBehaviors"]]:
        if behavior.get("PathPattern") == PAGE_PATTERN:
            continue  # the buyer's page, from its bucket (below)
        assert behavior["TargetOriginId"] == origin["Id"]
        assert behavior["ViewerProtocolPolicy"] == "https-only"  # a redirect would turn a POST into a GET
        assert "ForwardedValues" not in behavior
        if behavior.get("PathPattern") == draw:
            continue
        assert behavior["CachePolicyId"] == CACHING_DISABLED
        # Every viewer header, authorization included, but Host (API Gateway answers 403 to another host).
        assert behavior["OriginRequestPolicyId"] == ALL_VIEWER_EXCEPT_HOST_HEADER


PAGE_ORIGIN, PAGE_PATTERN = "page", "/page/*"
CACHING_OPTIMIZED = "658327ea-f89d-4fab-a63d-7e88639e58f6"


def test_the_page_comes_from_a_private_bucket_through_origin_access_control(edge: Template) -> None:
    config = distribution(edge)
    (origin,) = [o for o in config["Origins"] if o["Id"] == PAGE_ORIGIN]
    assert origin["DomainName"] == {"Fn::GetAtt": ["PageBucket", "RegionalDomainName"]}
    assert origin["OriginAccessControlId"] == {"Fn::GetAtt": ["PageOriginAccessControl", "Id"]}
    assert origin["S3OriginConfig"] == {"OriginAccessIdentity": ""}  # OAC, not the legacy identity
    control = edge.resource("PageOriginAccessControl")["Properties"]["OriginAccessControlConfig"]
    assert (control["OriginAccessControlOriginType"], control["SigningBehavior"]) == ("s3", "always")
    bucket = edge.resource("PageBucket")["Properties"]
    assert set(bucket["PublicAccessBlockConfiguration"].values()) == {True}
    statements = edge.resource("PageBucketPolicy")["Properties"]["PolicyDocument"]["Statement"]
    (read,) = [s for s in statements if s["Effect"] == "Allow"]
    assert read["Principal"] == {"Service": "cloudfront.amazonaws.com"}
    assert read["Action"] == "s3:GetObject"
    # This distribution alone may read, and only the page's keys.
    assert read["Condition"]["StringEquals"]["AWS:SourceArn"] == {
        "Fn::Sub": "arn:${AWS::Partition}:cloudfront::${AWS::AccountId}:distribution/${EdgeDistribution}"
    }
    assert read["Resource"] == {"Fn::Sub": "${PageBucket.Arn}/page/*"}
    # The page's one behavior: read-only, cached, before the default (which denies).
    page = behavior_for(config, "/page/index.html")
    assert page["PathPattern"] == PAGE_PATTERN
    assert page["TargetOriginId"] == PAGE_ORIGIN
    assert page["AllowedMethods"] == ["GET", "HEAD"]
    assert page["CachePolicyId"] == CACHING_OPTIMIZED
    assert functions_of(page) == []
    # No user route is served from the bucket.
    assert behavior_for(config, "/voucher-order/seckill/42")["TargetOriginId"] != PAGE_ORIGIN


def test_the_page_has_security_headers_and_a_policy_without_inline_script(edge: Template) -> None:
    page = behavior_for(distribution(edge), "/page/index.html")
    assert page["ResponseHeadersPolicyId"] == {"Ref": "PageHeadersPolicy"}
    config = edge.resource("PageHeadersPolicy")["Properties"]["ResponseHeadersPolicyConfig"]["SecurityHeadersConfig"]
    policy = dict(
        directive.strip().split(" ", 1)
        for directive in config["ContentSecurityPolicy"]["ContentSecurityPolicy"].split(";")
    )
    assert policy["default-src"] == "'none'"
    # Same origin only: no inline script, no eval, no third party (the API is on this origin too).
    for directive in ("script-src", "style-src", "connect-src"):
        assert policy[directive] == "'self'", directive
    assert policy["frame-ancestors"] == "'none'"
    assert config["FrameOptions"]["FrameOption"] == "DENY"
    assert config["ReferrerPolicy"]["ReferrerPolicy"] == "no-referrer"
    assert "ContentTypeOptions" in config
    assert int(config["StrictTransportSecurity"]["AccessControlMaxAgeSec"]) >= 31536000
    assert all(item.get("Override") is True for item in config.values())


def test_the_page_is_plain_files_with_no_inline_script_and_nothing_from_elsewhere() -> None:
    """What the policy allows is all the page uses: its own files, no inline script or style."""
    page = ROOT / "edge" / "page"
    html = (page / "index.html").read_text(encoding="utf-8")
    assert re.findall(r"<script\b[^>]*>", html) == ['<script type="module" src="app.js">']
    assert not re.search(r"<style|\sstyle\s*=|\son[a-z]+\s*=", html)  # no inline style or handler
    for name in ("index.html", "app.js", "audit.js", "clock.js", "tickets.js", "style.css"):
        assert "://" not in (page / name).read_text(encoding="utf-8"), name  # nothing from another origin


def test_the_draw_record_is_cached_two_seconds_at_most(edge: Template) -> None:
    """The one cached route: public, the same for everyone, read by every waiting client."""
    draw = behavior_for(distribution(edge), "/voucher/seckill/42/draw")
    assert draw["AllowedMethods"] == ["GET", "HEAD"]
    assert draw["CachePolicyId"] == {"Ref": "DrawRecordCachePolicy"}
    assert "OriginRequestPolicyId" not in draw  # nothing of the viewer's reaches the API
    assert functions_of(draw) == []
    config = edge.resource("DrawRecordCachePolicy")["Properties"]["CachePolicyConfig"]
    assert int(config["MaxTTL"]) <= 2
    assert int(config["DefaultTTL"]) <= int(config["MaxTTL"])
    keyed = config["ParametersInCacheKeyAndForwardedToOrigin"]
    assert keyed["HeadersConfig"] == {"HeaderBehavior": "none"}
    assert keyed["CookiesConfig"] == {"CookieBehavior": "none"}
    assert keyed["QueryStringsConfig"] == {"QueryStringBehavior": "none"}
    # The admin route beside it stays refused at the edge.
    assert functions_of(behavior_for(distribution(edge), "/voucher/seckill/42/stop")) == [DENY]


def test_the_entry_routes_reach_the_api_as_the_other_user_routes(edge: Template) -> None:
    """Through the press's behavior, whose function passes them on (edge/press.js touches the press only)."""
    entry = behavior_for(distribution(edge), "/voucher-order/seckill/42/entry")
    assert {"GET", "POST"} <= set(entry["AllowedMethods"])
    assert functions_of(entry) == [PRESS]
    assert entry["CachePolicyId"] == CACHING_DISABLED
    assert entry["OriginRequestPolicyId"] == ALL_VIEWER_EXCEPT_HOST_HEADER


def test_my_order_is_forwarded_with_the_token_and_never_cached(edge: Template) -> None:
    """GET /voucher-order/seckill/{voucherId} shares the press's path: the press function passes a GET
    on untouched (edge/press.js), and each caller's answer is their own."""
    mine = behavior_for(distribution(edge), "/voucher-order/seckill/42")
    assert "GET" in mine["AllowedMethods"]
    assert functions_of(mine) == [PRESS]
    assert mine["CachePolicyId"] == CACHING_DISABLED
    assert mine["OriginRequestPolicyId"] == ALL_VIEWER_EXCEPT_HOST_HEADER  # the authorization header too


def test_user_routes_are_served_and_signed_routes_are_refused_at_the_edge(template: Template, edge: Template) -> None:
    config = distribution(edge)
    served = 0
    for route, _ in template.routes():
        path = re.sub(r"\{\w+\}", "42", route.path)
        behavior = behavior_for(config, path)
        if route.auth == "AWS_IAM":
            # SigV4 signs the API's own host: through CloudFront the signature could never match.
            assert functions_of(behavior) == [DENY], route.path
        else:
            assert route.method in behavior["AllowedMethods"], route.path
            assert DENY not in functions_of(behavior), route.path
            served += 1
    # The press, the caller's order on a voucher, the order's status, the cancel, the voucher list,
    # a draw's entry (both) and record.
    assert served == 8
    press = behavior_for(config, "/voucher-order/seckill/42")
    assert functions_of(press) == [PRESS]
    assert "POST" in press["AllowedMethods"]
    # Only the press runs the press function; anything unknown is refused.
    for path in ("/voucher-order/42", "/voucher-order/42/cancel", "/voucher/list/1"):
        assert PRESS not in functions_of(behavior_for(config, path)), path
    assert functions_of(config["DefaultCacheBehavior"]) == [DENY]
    assert functions_of(behavior_for(config, "/voucher-order/42/payment/")) == [DENY]


def test_the_deny_function_answers_without_the_origin(edge: Template) -> None:
    code = edge.resource("EdgeDenyFunction")["Properties"]["FunctionCode"]
    assert "statusCode: 403" in code
    assert "event.request" not in code  # it never forwards


def test_the_deny_functions_answer_is_the_403_the_api_documents_on_each_route_it_denies(edge: Template) -> None:
    """A JSON Result with a code the route's 403 lists (before: no body, no content type)."""
    code = edge.resource("EdgeDenyFunction")["Properties"]["FunctionCode"]
    assert "'content-type': { value: 'application/json' }" in code
    found = re.search(r"data: '([^']+)'", code)
    assert found is not None
    answer = json.loads(found[1])
    assert (answer["success"], answer["data"]) == (False, None)
    spec = json.loads((ROOT / "docs" / "openapi.json").read_text(encoding="utf-8"))
    config = distribution(edge)
    denied = [
        (method, path)
        for path, ops in spec["paths"].items()
        for method in ops
        if functions_of(behavior_for(config, re.sub(r"\{[^}]+\}", "42", path))) == [DENY]
    ]
    assert ("post", "/voucher/seckill") in denied
    assert ("post", "/voucher-order/{orderId}/payment") in denied
    for method, path in denied:
        schema = spec["paths"][path][method]["responses"]["403"]["content"]["application/json"]["schema"]
        codes = {c for branch in schema["oneOf"] for c in branch["properties"].get("code", {}).get("enum", [])}
        assert answer["code"] in codes, (method, path)


def test_outputs_give_the_edge_and_keep_the_api(template: Template, edge: Template) -> None:
    outputs = template.data["Outputs"]
    assert outputs["EdgeUrl"]["Value"] == {"Fn::Sub": "https://${EdgeStack.Outputs.DomainName}"}
    assert edge.data["Outputs"]["DomainName"]["Value"] == {"Fn::GetAtt": ["EdgeDistribution", "DomainName"]}
    assert outputs["EdgeUrl"]["Condition"] == "HasEdge"
    assert "Condition" not in outputs["ApiEndpoint"]


# --- WAF: edge/waf.yaml, nested in the edge stack -----------------------------------------------

RULE_PARAMETERS = ("EdgeRateLimitPerIp", "EdgeRateLimitPerToken", "EdgeBotControl")


def rules(resources: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = resources["EdgeWebAcl"]["Properties"]["Rules"]
    return {r["Name"]: r for r in found if r != {"Ref": "AWS::NoValue"}}


def test_the_rules_live_in_edge_waf_yaml_alone(template: Template, edge: Template, waf: dict[str, Any]) -> None:
    """One rule set: no other template declares a web ACL, and what the operator sets on
    template.yaml reaches edge/waf.yaml's parameters of the same names, which mean the same."""
    for name, data in (("template.yaml", template.data), ("edge/template.yaml", edge.data)):
        for logical_id, resource in data["Resources"].items():
            assert not resource["Type"].startswith("AWS::WAFv2::"), f"{name}: {logical_id}"
    assert waf["Resources"]["EdgeWebAcl"]["Type"] == "AWS::WAFv2::WebACL"
    for name in (*RULE_PARAMETERS, "LogRetentionDays"):
        for parent, application in ((template, EDGE_STACK), (edge, WAF_STACK)):
            assert parent.resource(application)["Properties"]["Parameters"][name] == {"Ref": name}, name
        # The values the Seckill stack accepts are values the nested ones accept.
        for key in ("Type", "Default", "AllowedValues"):
            assert template.data["Parameters"][name].get(key) == waf["Parameters"][name].get(key), (name, key)
    assert waf["Outputs"]["WebAclArn"]["Value"] == {"Fn::GetAtt": ["EdgeWebAcl", "Arn"]}


def test_rate_limits_guard_the_press_and_order_routes(
    transformed: dict[str, Any], edge: Template, waf: dict[str, Any]
) -> None:
    parameters = transformed["Parameters"]
    found = rules(waf_stack(transformed, edge, waf))
    # What the operator sets on template.yaml is what WAF counts to.
    lowered = rules(waf_stack(transformed, edge, waf, EdgeRateLimitPerIp=11, EdgeRateLimitPerToken=12))
    assert lowered["press-rate-per-ip"]["Statement"]["RateBasedStatement"]["Limit"] == 11
    assert lowered["press-rate-per-token"]["Statement"]["RateBasedStatement"]["Limit"] == 12
    for name, key, parameter in (
        ("press-rate-per-ip", "IP", "EdgeRateLimitPerIp"),
        ("press-rate-per-token", "CUSTOM_KEYS", "EdgeRateLimitPerToken"),
    ):
        rule = found[name]
        statement = rule["Statement"]["RateBasedStatement"]
        assert statement["AggregateKeyType"] == key
        # WAF counts over 60, 120, 300 or 600 seconds; its lowest limit is 10.
        assert statement["EvaluationWindowSec"] == 60
        assert int(parameters[parameter]["MinValue"]) >= 10
        assert statement["Limit"] == int(parameters[parameter]["Default"])
        path = statement["ScopeDownStatement"]["ByteMatchStatement"]
        assert (path["FieldToMatch"], path["PositionalConstraint"]) == ({"UriPath": {}}, "STARTS_WITH")
        # The press, and the status and cancel routes a guessed order id reaches, count alike.
        for route in ("/voucher-order/seckill/1", "/voucher-order/2", "/voucher-order/2/cancel"):
            assert route.startswith(path["SearchString"]), route
        assert not "/voucher/list/1".startswith(path["SearchString"])
        answer = {"ResponseCode": 429, "CustomResponseBodyKey": "too-many-requests"}
        assert rule["Action"] == {"Block": {"CustomResponse": answer}}
    # Its body is a Result, byte for byte as the function would write it.
    body = waf_stack(transformed, edge, waf)["EdgeWebAcl"]["Properties"]["CustomResponseBodies"]["too-many-requests"]
    assert body["ContentType"] == "APPLICATION_JSON"
    result = json.loads(body["Content"])
    assert body["Content"] == results.fail(429, result["code"], result["errorMsg"]).body
    assert result["code"] == "TOO_MANY_REQUESTS"
    token = found["press-rate-per-token"]["Statement"]["RateBasedStatement"]["CustomKeys"]
    assert token == [{"Header": {"Name": "authorization", "TextTransformations": [{"Priority": 0, "Type": "NONE"}]}}]
    # A buyer presses once or a few times: the defaults are far above that, and the IP's above the token's.
    assert int(parameters["EdgeRateLimitPerIp"]["Default"]) > int(parameters["EdgeRateLimitPerToken"]["Default"]) >= 10


def test_managed_rules_and_bot_control_only_when_asked(
    transformed: dict[str, Any], edge: Template, waf: dict[str, Any]
) -> None:
    off, on = rules(waf_stack(transformed, edge, waf)), rules(waf_stack(transformed, edge, waf, EdgeBotControl="on"))
    managed = {
        r["Statement"]["ManagedRuleGroupStatement"]["Name"]
        for r in off.values()
        if "ManagedRuleGroupStatement" in r["Statement"]
    }
    assert managed == {"AWSManagedRulesCommonRuleSet", "AWSManagedRulesKnownBadInputsRuleSet"}
    assert transformed["Parameters"]["EdgeBotControl"]["Default"] == "off"
    assert set(on) - set(off) == {"aws-bot-control", "press-captcha-for-bots"}
    bots = on["aws-bot-control"]
    assert bots["OverrideAction"] == {"Count": {}}  # labels; the CAPTCHA rule acts on them
    assert bots["Statement"]["ManagedRuleGroupStatement"]["ScopeDownStatement"]["ByteMatchStatement"][
        "SearchString"
    ] == ("/voucher-order/seckill/")
    assert on["press-captcha-for-bots"]["Action"] == {"Captcha": {}}
    priorities = [r["Priority"] for r in on.values()]
    assert len(set(priorities)) == len(priorities)
    assert all(r["VisibilityConfig"]["CloudWatchMetricsEnabled"] for r in on.values())


@pytest.mark.parametrize(
    ("region", "acl_arn", "created"),
    [("us-east-1", "", True), ("us-east-1", "arn:aws:wafv2:us-east-1:123456789012:global/webacl/w/1", False),
     ("eu-west-1", "arn:aws:wafv2:us-east-1:123456789012:global/webacl/w/1", False)],
)  # fmt: skip
def test_the_distribution_gets_the_stacks_acl_or_the_one_given(
    transformed: dict[str, Any], edge: Template, waf: dict[str, Any], region: str, acl_arn: str, created: bool
) -> None:
    parameters = {"AWS::Region": region, "EdgeWebAclArn": acl_arn}
    resources = edge_stack(transformed, edge, **parameters)
    assert (WAF_STACK in resources) is created
    acl = resources["EdgeDistribution"]["Properties"]["DistributionConfig"]["WebACLId"]
    assert acl == ({"Fn::GetAtt": [WAF_STACK, "Outputs.WebAclArn"]} if created else acl_arn)
    if created:
        acls = waf_stack(transformed, edge, waf, **parameters)
        assert acls["EdgeWebAcl"]["Properties"]["Scope"] == "CLOUDFRONT"
        # Named after the Seckill stack, not the nested stack's random name.
        assert acls["EdgeWebAcl"]["Properties"]["Name"] == {"Fn::Sub": "${ServiceName}-edge"}
        assert "EdgeWafLogging" in acls


def test_outside_us_east_1_the_edge_needs_an_acl(template: Template, waf: dict[str, Any]) -> None:
    rule = template.data["Rules"]["EdgeOutsideUsEast1NeedsWebAcl"]
    assert "us-east-1" in json.dumps(rule["RuleCondition"])
    assert rule["Assertions"][0]["Assert"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "EdgeWebAclArn"}, ""]}]}
    pattern = re.compile(template.data["Parameters"]["EdgeWebAclArn"]["AllowedPattern"])
    assert pattern.fullmatch("")
    assert pattern.fullmatch("arn:aws:wafv2:us-east-1:123456789012:global/webacl/seckill-waf/abc")
    assert not pattern.fullmatch("arn:aws:wafv2:eu-west-1:123456789012:regional/webacl/seckill-waf/abc")
    # edge/waf.yaml deployed on its own refuses any other region.
    (assertion,) = waf["Rules"]["CloudFrontAclsLiveInUsEast1"]["Assertions"]
    assert assertion["Assert"] == {"Fn::Equals": [{"Ref": "AWS::Region"}, "us-east-1"]}


def test_waf_logs_only_what_it_blocks_or_challenges(waf: dict[str, Any]) -> None:
    group = waf["Resources"]["EdgeWafLogs"]["Properties"]
    assert group["LogGroupName"]["Fn::Sub"][0].startswith("aws-waf-logs-")  # WAF's required prefix
    assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    logging = waf["Resources"]["EdgeWafLogging"]["Properties"]
    assert logging["LoggingFilter"]["DefaultBehavior"] == "DROP"
    (keep,) = logging["LoggingFilter"]["Filters"]
    assert keep["Behavior"] == "KEEP"
    assert {c["ActionCondition"]["Action"] for c in keep["Conditions"]} == {"BLOCK", "CAPTCHA"}


# --- the sale's dashboard --------------------------------------------------------------------

WIDGETS = "EdgeStack.Outputs.DashboardWidgets"


def sub_text(part: Any) -> str:
    """A dashboard part as text, every ${X} but the edge's widgets written X."""
    if isinstance(part, str):
        return part
    template = part["Fn::Sub"] if isinstance(part["Fn::Sub"], str) else part["Fn::Sub"][0]
    return re.sub(r"\$\{([\w:.]+)\}", lambda m: m[0] if m[1] == WIDGETS else m[1].replace(":", "_"), template)


def dashboard(transformed: dict[str, Any], edge: Template, **parameters: str) -> dict[str, Any]:
    """The dashboard's JSON as CloudFormation would write it, with the edge stack's widgets
    (as template.yaml creates it), every other ${...} a placeholder."""
    body = stack(transformed, **parameters)["SaleDashboard"]["Properties"]["DashboardBody"]
    separator, parts = body["Fn::Join"]
    text = separator.join(sub_text(p) for p in parts)
    if parameters.get("Edge") != "none":
        given = passed(transformed, EDGE_STACK, **parameters)
        output = evaluate(edge.data["Outputs"]["DashboardWidgets"]["Value"], edge.data, given)
        text = text.replace(f"${{{WIDGETS}}}", sub_text(output))
    found: dict[str, Any] = json.loads(text)
    return found


def test_the_dashboard_shows_the_noon(transformed: dict[str, Any], edge: Template) -> None:
    with_edge, without = dashboard(transformed, edge), dashboard(transformed, edge, Edge="none")
    shown = json.dumps(with_edge)
    # Every refusal the gate can answer, as the API counts it (seckill.press.tally: "Refused" + code).
    for refusal in REFUSALS.values():
        assert f'"Refused{refusal.code}"' in shown, refusal.code
    for metric in ("OrdersAccepted", "TryAgain", "FunctionInvocations", "BlockedRequests", "Throttles"):
        assert metric in shown, metric
    for queue in ("OrderQueue", "OrderExpiryQueue", "OrderDeadLetterQueue", "OrderPoisonQueue", "EdgeStateQueue"):
        assert f"{queue}.QueueName" in shown, queue
    # CloudFront's and WAF's metrics are in us-east-1 whatever the stack's region.
    edge_widgets = [w for w in with_edge["widgets"] if "AWS/CloudFront" in json.dumps(w) or "WAFV2" in json.dumps(w)]
    assert len(edge_widgets) == 2
    assert all(w["properties"]["region"] == "us-east-1" for w in edge_widgets)
    assert len(without["widgets"]) == len(with_edge["widgets"]) - 3
    assert "Edge" not in json.dumps(without)
    # CloudFront's function metrics carry the function's name (its Ref is the ARN).
    name = edge.resource("EdgePressFunction")["Properties"]["Name"]["Fn::Sub"]
    assert f'FunctionName=\\"{name.replace("${", "").replace("}", "")}\\"' in shown
