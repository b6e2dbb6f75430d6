"""template.yaml's edge (parameter Edge): the state queue and its publisher, checked
offline with SAM's translator, as tests/unit/test_template.py checks the rest."""

from __future__ import annotations

import json
from typing import Any

from seckill_local.template import Template
from tests.unit.test_template import actions, evaluate, statements, transformed

__all__ = ["transformed"]  # the fixture, shared with test_template.py

# The in-VPC functions that change a voucher's state, and so queue it for the edge.
STATE_SENDERS = ("SeckillApiFunction", "OrderPersisterFunction", "OrderExpiryFunction", "ReconcilerFunction")
EDGE_RESOURCE_TYPES = ("AWS::CloudFront::", "AWS::WAFv2::")


def stack(transformed: dict[str, Any], **parameters: str) -> dict[str, dict[str, Any]]:
    """The resources a stack with these parameters has, properties resolved."""
    parameters = {"AWS::Region": "us-east-1", **parameters}
    return {
        name: {**resource, "Properties": evaluate(resource.get("Properties", {}), transformed, parameters)}
        for name, resource in transformed["Resources"].items()
        if "Condition" not in resource or evaluate({"Condition": resource["Condition"]}, transformed, parameters)
    }


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
    assert {"EdgeStateQueue", "EdgeStateDeadLetterQueue", "EdgePublisherFunction", "EdgeKeyValueStore"} <= edge_only
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


def test_the_publisher_runs_outside_the_vpc_with_the_store_only(transformed: dict[str, Any]) -> None:
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
    assert env["EDGE_KVS_ARN"] == {"Fn::GetAtt": ["EdgeKeyValueStore", "Arn"]}
    assert env["AWS_ENDPOINT_URL_CLOUDFRONT_KEYVALUESTORE"] == {"Ref": "AWS::NoValue"}  # a local knob
    kvs = {s["Sid"]: s for s in role_statements(resources, "EdgePublisherFunction") if "Sid" in s}["WriteEdgeState"]
    assert sorted(actions(kvs)) == [
        "cloudfront-keyvaluestore:DescribeKeyValueStore",
        "cloudfront-keyvaluestore:GetKey",
        "cloudfront-keyvaluestore:PutKey",
    ]
    assert kvs["Resource"] == {"Fn::GetAtt": ["EdgeKeyValueStore", "Arn"]}
    # No other role may touch the store; the publisher touches nothing else but its queue.
    for name, resource in resources.items():
        if resource["Type"] == "AWS::IAM::Role" and name != "EdgePublisherFunctionRole":
            assert "cloudfront-keyvaluestore" not in json.dumps(resource["Properties"]), name
    others = [s for s in role_statements(resources, "EdgePublisherFunction") if s is not kvs]
    assert all("EdgeStateQueue" in json.dumps(s["Resource"]) for s in others), others
    assert not any("secretsmanager" in json.dumps(s) for s in others)
