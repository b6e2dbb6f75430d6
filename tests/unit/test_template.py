"""template.yaml's wiring, checked without AWS: handlers, environment, queues,
policies, network, events/ and samconfig.toml.

The template is read with the local runner's loader (``!Ref`` etc. become their
long forms), so these tests see what ``sam build`` and the runner see.
"""

from __future__ import annotations

import ast
import importlib.resources
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

from seckill.infra import secrets
from seckill_local.checkout import ROOT, TEMPLATE
from seckill_local.template import Function, Template
from seckill_ops import stack_outputs

EVENTS = ROOT / "events"
CODE_DIRS = (ROOT / "layers" / "seckill", ROOT / "functions")

# What a function's code does -> the variables it then needs from the template.
NEEDS: dict[str, set[str]] = {
    "redis_client(": {"REDIS_URL", "REDIS_CLUSTER", "REDIS_AUTH_SECRET_ARN"},
    "Database.from_settings(": {"DB_HOST", "DB_PORT", "DB_NAME", "DB_SECRET_ARN"},
    "credentials(": {"DB_HOST", "DB_PORT", "DB_NAME", "DB_SECRET_ARN"},
    "order_queue_url": {"ORDER_QUEUE_URL"},
    "order_dlq_url": {"ORDER_DLQ_URL"},
    "order_poison_queue_url": {"ORDER_POISON_QUEUE_URL"},
    "order_expiry_queue_url": {"ORDER_EXPIRY_QUEUE_URL"},
    "edge_kvs_arn": {"EDGE_KVS_ARN"},
    "edge_state_queue_url": {"EDGE_STATE_QUEUE_URL"},
    "OriginCheck.from_env(": {"ORIGIN_SECRET_ARN", "SECKILL_ORIGIN_SECRET"},
    "load_ring(": {"PASS_KEYS_SECRET_ARN"},
    "settings.timezone": {"SECKILL_TIMEZONE"},
    "draw_clock_queue_url": {"DRAW_CLOCK_QUEUE_URL"},
    "key_ring(": {"PASS_KEYS_SECRET_ARN"},
    "signing_ring(": {"PASS_KEYS_SECRET_ARN", "PASS_KEYS_HELD_SECRET_ARN"},
    "current_ring(": {"PASS_KEYS_SECRET_ARN", "PASS_KEYS_HELD_SECRET_ARN"},
    "ensure_ring(": {"PASS_KEYS_SECRET_ARN"},
    "Logger(": {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_LOG_LEVEL"},
}
# Read by the code but rightly not set in AWS, each for its reason.
OPTIONAL: dict[str, str] = {
    "DB_USER": "in AWS the secret holds it; declared as AWS::NoValue for sam local",
    "DB_PASSWORD": "in AWS the secret holds it; declared as AWS::NoValue for sam local",
    "DB_TLS": "follows DB_SECRET_ARN: TLS with a secret",
    "AWS_ENDPOINT_URL_SQS": "local SQS only; declared as AWS::NoValue for sam local",
    "AWS_ENDPOINT_URL_CLOUDFRONT_KEYVALUESTORE": "the local store stand-in only; declared as AWS::NoValue",
    "SECKILL_REFUSAL_CACHE_SECONDS": "tuning with a default",
    "SECKILL_PASS_KEYS": "the pass key ring of local runs; in AWS PASS_KEYS_SECRET_ARN; declared as AWS::NoValue",
    "SECKILL_STATUS_TTL_SECONDS": "tuning with a default",
    "AWS_LAMBDA_INITIALIZATION_TYPE": "set by Lambda: on-demand, provisioned-concurrency or snap-start",
    "_X_AMZN_TRACE_ID": "set by Lambda per invocation: whether X-Ray samples it",
}


DATA_STACK = "DataStack"  # template.yaml's nested data/template.yaml: Redis, MySQL, RDS Proxy


def data_output(name: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [DATA_STACK, f"Outputs.{name}"]}


# The secret RDS manages (and rotates) for the master user, and Redis's AUTH token: the data
# stack gives both.
DB_SECRET = data_output("DbSecretArn")
REDIS_SECRET = data_output("RedisAuthSecretArn")
PASS_SECRET = {"Ref": "PassKeysSecret"}
HELD_SECRET = {"Ref": "PassKeysHeldSecret"}
ORIGIN_SECRET = {"Ref": "OriginSecret"}


@pytest.fixture(scope="module")
def data(template: Template) -> dict[str, Any]:
    return template.data


def resources(data: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in data["Resources"].items() if r["Type"] == type_}


def props(data: dict[str, Any], logical_id: str) -> dict[str, Any]:
    properties: dict[str, Any] = data["Resources"][logical_id].get("Properties", {})
    return properties


def source(fn: Function) -> str:
    module = fn.handler.rpartition(".")[0]
    return (fn.code_uri / f"{module.replace('.', '/')}.py").read_text(encoding="utf-8")


def parameter_default(data: dict[str, Any], value: Any) -> Any:
    """A literal, or the default of the parameter a ``Ref`` names."""
    if isinstance(value, dict) and "Ref" in value:
        return data["Parameters"][value["Ref"]]["Default"]
    return value


# --- functions and their environment -----------------------------------------------------


def test_every_function_has_its_handler(template: Template) -> None:
    assert {"SeckillApiFunction", "OrderPersisterFunction", "AuthorizerFunction", "MigratorFunction"} <= set(
        template.functions
    )
    for fn in template.functions.values():
        assert fn.code_uri.is_relative_to(ROOT / "functions"), fn.logical_id
        attr = fn.handler.rpartition(".")[2]
        assert re.search(rf"^def {attr}\(", source(fn), re.MULTILINE), f"{fn.logical_id}: no {fn.handler}"


def env_names_read(path: Path) -> Iterator[str]:
    """Variable names the module reads: X in env.get("X"), _get(env, "X", ...),
    os.environ["X"], os.getenv("X")."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = re.compile(r"[A-Z][A-Z0-9_]{2,}")
    for node in ast.walk(tree):
        args: list[ast.expr] = []
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in {"get", "getenv", "_get"}:
                args = list(node.args)
        elif isinstance(node, ast.Subscript) and "environ" in ast.unparse(node.value):
            args = [node.slice]
        for arg in args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and name.fullmatch(arg.value):
                yield arg.value


def test_every_variable_the_code_reads_is_accounted_for() -> None:
    read = {var for folder in CODE_DIRS for path in folder.rglob("*.py") for var in env_names_read(path)}
    # The scan finds Settings' variables (a sanity check of the scan itself).
    assert {"REDIS_URL", "ORDER_QUEUE_URL", "DB_SECRET_ARN", "DB_TLS"} <= read
    known = set().union(*NEEDS.values()) | set(OPTIONAL)
    assert read <= known, f"decide where these are declared: {sorted(read - known)}"


def test_every_function_declares_the_variables_it_needs(template: Template) -> None:
    for fn in template.functions.values():
        code = source(fn)
        needed = set().union(*(variables for marker, variables in NEEDS.items() if marker in code))
        missing = needed - set(fn.environment)
        assert not missing, f"{fn.logical_id} needs {sorted(missing)}"
    # The queue URL only where messages are sent.
    senders = {fn.logical_id for fn in template.functions.values() if "ORDER_QUEUE_URL" in fn.environment}
    assert "SeckillApiFunction" in senders
    assert "OrderPersisterFunction" not in senders


def test_variables_point_at_the_stacks_resources(template: Template, data: dict[str, Any]) -> None:
    env = template.functions["SeckillApiFunction"].environment
    redis_url = env["REDIS_URL"]["Fn::Sub"]
    assert redis_url.startswith("rediss://"), "ElastiCache has TLS in transit"
    assert "${DataStack.Outputs.RedisEndpoint}" in redis_url
    assert env["REDIS_CLUSTER"] == "false"
    assert env["DB_HOST"] == data_output("DbProxyEndpoint")
    assert env["DB_SECRET_ARN"] == DB_SECRET
    assert env["REDIS_AUTH_SECRET_ARN"] == REDIS_SECRET
    assert env["ORDER_QUEUE_URL"] == {"Ref": "OrderQueue"}
    # Local-only knobs are absent in AWS.
    for name in ("DB_USER", "DB_PASSWORD", "AWS_ENDPOINT_URL_SQS"):
        assert env[name] == {"Ref": "AWS::NoValue"}, name
    for fn in template.functions.values():
        assert {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_LOG_LEVEL"} <= set(
            fn.environment
        )


def test_globals_runtime_tracing_network_and_layer(data: dict[str, Any]) -> None:
    globals_ = data["Globals"]["Function"]
    # SnapStart (ColdStartMitigation=snapstart) needs Python 3.12 or later.
    assert globals_["Runtime"] == "python3.12"
    assert data["Resources"]["SeckillLayer"]["Properties"]["CompatibleRuntimes"] == ["python3.12"]
    assert globals_["Architectures"] == ["x86_64"]
    assert globals_["Tracing"] == "Active"
    assert globals_["Layers"] == [{"Ref": "SeckillLayer"}]
    # The network stack's subnets and the functions' group, which Redis and RDS Proxy admit.
    assert globals_["VpcConfig"]["SecurityGroupIds"] == [network_output("FunctionSecurityGroupId")]
    assert globals_["VpcConfig"]["SubnetIds"] == {"Fn::Split": [",", network_output("SubnetIds")]}
    for logical_id in resources(data, "AWS::Serverless::Function"):
        assert "Runtime" not in props(data, logical_id), f"{logical_id}: the runtime comes from Globals"


def secrets_read(data: dict[str, Any], logical_id: str) -> list[Any]:
    """The secrets a function's policies let it read (a conditional policy's, when its condition holds)."""
    read = []
    for policy in props(data, logical_id).get("Policies", []):
        if "Fn::If" in policy:
            policy = policy["Fn::If"][1]
        if "AWSSecretsManagerGetSecretValuePolicy" in policy:
            read.append(policy["AWSSecretsManagerGetSecretValuePolicy"]["SecretArn"])
        # A statement of its own (the migrator's: it also puts the first pass key ring).
        read += [
            s["Resource"] for s in policy.get("Statement", []) if "secretsmanager:GetSecretValue" in s.get("Action", [])
        ]
    return read


def test_functions_using_a_secret_may_read_it_and_no_other_may(template: Template, data: dict[str, Any]) -> None:
    users: dict[str, set[str]] = {"Redis": set(), "MySQL": set(), "passes": set(), "origin": set(), "held": set()}
    secrets = (
        ("Redis", REDIS_SECRET),
        ("MySQL", DB_SECRET),
        ("passes", PASS_SECRET),
        ("origin", ORIGIN_SECRET),
        ("held", HELD_SECRET),
    )
    for fn in template.functions.values():
        code = source(fn)
        uses = {
            "Redis": "redis_client(" in code,
            "MySQL": "Database.from_settings(" in code or "credentials(" in code,
            # The pass key ring: the API signs and verifies passes, the publisher copies its
            # keys, the migrator puts the first ring.
            "passes": any(
                f"{call}(" in code for call in ("key_ring", "load_ring", "ensure_ring", "signing_ring", "current_ring")
            ),
            "origin": "OriginCheck.from_env(" in code,
            # What the edge holds of the ring: the API reads it, the publisher writes it.
            "held": any(f"{call}(" in code for call in ("signing_ring", "current_ring")),
        }
        assert sorted(map(json.dumps, secrets_read(data, fn.logical_id))) == sorted(
            json.dumps(secret) for store, secret in secrets if uses[store]
        ), fn.logical_id
        users = {store: found | ({fn.logical_id} if uses[store] else set()) for store, found in users.items()}
    assert {"AuthorizerFunction", "SeckillApiFunction", "OrderPersisterFunction"} <= users["Redis"]
    assert "MigratorFunction" in users["MySQL"] - users["Redis"]


# --- queues, event source mapping, alarms ---------------------------------------------------


def test_queues_redrive_and_encryption(template: Template, data: dict[str, Any]) -> None:
    queue, dlq = props(data, "OrderQueue"), props(data, "OrderDeadLetterQueue")
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": ["OrderDeadLetterQueue", "Arn"]}
    assert int(queue["RedrivePolicy"]["maxReceiveCount"]) >= 5
    assert queue["SqsManagedSseEnabled"] is True
    assert dlq["SqsManagedSseEnabled"] is True
    # A dead letter must outlive the message it was: the DLQ keeps them longer.
    assert int(dlq["MessageRetentionPeriod"]) > int(queue["MessageRetentionPeriod"])
    # The poison queue keeps what it holds as long as SQS can (14 days) and redrives nowhere.
    poison = props(data, "OrderPoisonQueue")
    assert poison["SqsManagedSseEnabled"] is True
    assert int(poison["MessageRetentionPeriod"]) == 14 * 86400
    assert "RedrivePolicy" not in poison
    assert set(template.queues()) == {
        "OrderQueue",
        "OrderDeadLetterQueue",
        "OrderPoisonQueue",
        "OrderExpiryQueue",
        "OrderExpiryDeadLetterQueue",
        "EdgeStateQueue",
        "EdgeStateDeadLetterQueue",
        "DrawClockQueue",
        "DrawClockDeadLetterQueue",
    }


def test_expiry_queue_redrive_retention_and_visibility(template: Template, data: dict[str, Any]) -> None:
    queue, dlq = props(data, "OrderExpiryQueue"), props(data, "OrderExpiryDeadLetterQueue")
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": ["OrderExpiryDeadLetterQueue", "Arn"]}
    assert int(queue["RedrivePolicy"]["maxReceiveCount"]) >= 5
    assert queue["SqsManagedSseEnabled"] is True
    assert dlq["SqsManagedSseEnabled"] is True
    # An expiry waits out a consumer that is down for days: both keep messages as long as SQS can.
    assert int(queue["MessageRetentionPeriod"]) == int(dlq["MessageRetentionPeriod"]) == 14 * 86400
    assert "DelaySeconds" not in queue  # each message carries its own delay
    function = template.functions["OrderExpiryFunction"]
    assert int(queue["VisibilityTimeout"]) >= 6 * function.timeout
    (source_,) = function.sqs_events
    assert source_["Queue"] == {"Fn::GetAtt": ["OrderExpiryQueue", "Arn"]}
    assert source_["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert 1 <= int(source_["BatchSize"]) <= 10
    assert int(source_["ScalingConfig"]["MaximumConcurrency"]) >= 2


def test_expiry_queue_senders_and_poller(template: Template, data: dict[str, Any]) -> None:
    """The persister sends expiries, the expiry function polls them and sends early ones
    again; nobody else knows the queue."""
    send = {"SQSSendMessagePolicy": {"QueueName": {"Fn::GetAtt": ["OrderExpiryQueue", "QueueName"]}}}
    poll = {"SQSPollerPolicy": {"QueueName": {"Fn::GetAtt": ["OrderExpiryQueue", "QueueName"]}}}
    expiry_policies = props(data, "OrderExpiryFunction")["Policies"]
    assert send in expiry_policies
    assert poll in expiry_policies
    assert send in props(data, "OrderPersisterFunction")["Policies"]
    for logical_id in ("OrderPersisterFunction", "OrderExpiryFunction"):
        env = template.functions[logical_id].environment
        assert env["ORDER_EXPIRY_QUEUE_URL"] == {"Ref": "OrderExpiryQueue"}, logical_id
        assert template.functions[logical_id].environment.get("ORDER_QUEUE_URL") is None, logical_id
    for logical_id, resource in resources(data, "AWS::Serverless::Function").items():
        if logical_id not in {"OrderPersisterFunction", "OrderExpiryFunction"}:
            assert "OrderExpiry" not in json.dumps(resource), logical_id
    # The expiry function lives where the persister does: the VPC (Globals), Redis, the database.
    assert "VpcConfig" not in props(data, "OrderExpiryFunction")


def test_the_persister_may_only_send_to_the_poison_queue(template: Template, data: dict[str, Any]) -> None:
    persister = template.functions["OrderPersisterFunction"]
    assert persister.environment["ORDER_POISON_QUEUE_URL"] == {"Ref": "OrderPoisonQueue"}
    poison_arn = {"Fn::GetAtt": ["OrderPoisonQueue", "Arn"]}
    granted = [
        statement
        for policy in props(data, "OrderPersisterFunction")["Policies"]
        if isinstance(policy, dict) and "Statement" in policy
        for statement in statements(policy)
        if "OrderPoisonQueue" in json.dumps(statement)
    ]
    assert granted == [
        {"Sid": "SendToPoisonQueue", "Effect": "Allow", "Action": "sqs:SendMessage", "Resource": poison_arn}
    ]
    # No other function knows the poison queue: only an operator reads it.
    for logical_id, resource in resources(data, "AWS::Serverless::Function").items():
        if logical_id != "OrderPersisterFunction":
            assert "OrderPoisonQueue" not in json.dumps(resource), logical_id


def test_event_source_mapping_and_visibility_timeout(template: Template, data: dict[str, Any]) -> None:
    persister = template.functions["OrderPersisterFunction"]
    (source_,) = persister.sqs_events  # the runner reads the mapping below as SAM's SQS event
    assert source_["Queue"] == {"Fn::GetAtt": ["OrderQueue", "Arn"]}
    assert source_["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    batch = int(parameter_default(data, source_["BatchSize"]))
    window = int(source_["MaximumBatchingWindowInSeconds"])
    assert 1 <= batch <= 10 or window >= 1  # SQS allows batches over 10 only with a window
    concurrency = source_["ScalingConfig"]["MaximumConcurrency"]
    assert int(parameter_default(data, concurrency)) >= 2
    assert int(data["Parameters"][concurrency["Ref"]]["MinValue"]) >= 2  # the service's minimum
    # Lambda's advice: visibility at least six times the function's timeout.
    visibility = int(props(data, "OrderQueue")["VisibilityTimeout"])
    assert visibility >= 6 * persister.timeout


def test_the_queue_is_polled_through_a_mapping_scoped_to_order_queue(data: dict[str, Any]) -> None:
    """A SAM SQS event would attach AWSLambdaSQSQueueExecutionRole (resource *);
    the mapping plus SQSPollerPolicy reads OrderQueue only, with the same settings."""
    for logical_id in resources(data, "AWS::Serverless::Function"):
        events = props(data, logical_id).get("Events", {}).values()
        assert all(event["Type"] != "SQS" for event in events), logical_id
    mapping = resources(data, "AWS::Lambda::EventSourceMapping")["OrderPersisterQueueMapping"]
    assert mapping["Properties"] == {
        "FunctionName": {"Ref": "OrderPersisterFunction"},
        "EventSourceArn": {"Fn::GetAtt": ["OrderQueue", "Arn"]},
        "BatchSize": {"Ref": "PersisterBatchSize"},
        "MaximumBatchingWindowInSeconds": 1,
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "ScalingConfig": {"MaximumConcurrency": {"Ref": "PersisterMaxConcurrency"}},
    }
    # Lambda checks the role's permissions when the mapping is created.
    assert mapping["DependsOn"] == "OrderPersisterFunctionRole"
    policies = props(data, "OrderPersisterFunction")["Policies"]
    assert {"SQSPollerPolicy": {"QueueName": {"Fn::GetAtt": ["OrderQueue", "QueueName"]}}} in policies
    expiry = resources(data, "AWS::Lambda::EventSourceMapping")["OrderExpiryQueueMapping"]
    assert expiry["Properties"]["EventSourceArn"] == {"Fn::GetAtt": ["OrderExpiryQueue", "Arn"]}
    assert expiry["DependsOn"] == "OrderExpiryFunctionRole"


def alarm_on(data: dict[str, Any], namespace: str, metric: str, dimension: Any = None) -> dict[str, Any]:
    """The one alarm on that metric (of that dimension's value, when given)."""
    (alarm,) = [a["Properties"] for a in resources(data, "AWS::CloudWatch::Alarm").values()
                if a["Properties"].get("Namespace") == namespace and a["Properties"].get("MetricName") == metric
                and (dimension is None or a["Properties"]["Dimensions"][0]["Value"] == dimension)]  # fmt: skip
    assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}], f"{metric}: an alarm tells someone"
    return alarm


def test_alarms(data: dict[str, Any]) -> None:
    for queue in ("OrderDeadLetterQueue", "OrderPoisonQueue", "OrderExpiryDeadLetterQueue", "EdgeStateDeadLetterQueue"):
        name = {"Fn::GetAtt": [queue, "QueueName"]}
        alarm = alarm_on(data, "AWS/SQS", "ApproximateNumberOfMessagesVisible", name)
        assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": name}]
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert float(alarm["Threshold"]) == 1  # any message at all
        assert alarm["Statistic"] == "Maximum"
    errors = alarm_on(data, "AWS/Lambda", "Errors")
    assert errors["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": "OrderPersisterFunction"}}]
    api = alarm_on(data, "AWS/ApiGateway", "5xx")
    assert api["Dimensions"] == [{"Name": "ApiId", "Value": {"Ref": "SeckillHttpApi"}}]
    # The metric DrawClockFunction emits (Powertools names the dimension "service").
    late = alarm_on(data, "Seckill", "DrawCloseMoveLate")
    service = props(data, "DrawClockFunction")["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"]
    assert late["Dimensions"] == [{"Name": "service", "Value": service}]
    assert '"DrawCloseMoveLate"' in (ROOT / "functions" / "draw_clock" / "app.py").read_text(encoding="utf-8")


def test_a_failed_secret_refresh_alarms_whichever_function_counted_it(data: dict[str, Any]) -> None:
    """seckill.infra.secrets counts SecretRefreshFailed under each function's own service
    dimension: the alarm sums them all, with one Metrics Insights query."""
    alarm = resources(data, "AWS::CloudWatch::Alarm")["SecretRefreshFailedAlarm"]["Properties"]
    (query,) = alarm["Metrics"]
    assert query["Expression"] == f"SELECT SUM({secrets.METRIC}) FROM Seckill"
    assert query["ReturnData"] is True
    assert query["Period"] == 60
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert float(alarm["Threshold"]) == 1
    assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": "AlarmTopic"}]


# --- policies ---------------------------------------------------------------------------------


def sam_policy_templates() -> dict[str, list[str]]:
    """SAM's policy templates (name -> the actions it grants), from SAM's translator
    (requirements-dev.in pins the version the SAM CLI does)."""
    document = importlib.resources.files("samtranslator") / "policy_templates_data" / "policy_templates.json"
    templates = json.loads(document.read_text(encoding="utf-8"))["Templates"]
    return {
        name: [action for statement in statements(t["Definition"]) for action in actions(statement)]
        for name, t in templates.items()
    }


def actions(statement: dict[str, Any]) -> list[str]:
    found = statement.get("Action", [])
    return [found] if isinstance(found, str) else list(found)


def statements(document: dict[str, Any]) -> list[dict[str, Any]]:
    found = document.get("Statement", [])
    return found if isinstance(found, list) else [found]


def unconditional(policy: Any) -> Any:
    """A policy as granted when its condition holds (``!If [C, policy, AWS::NoValue]``)."""
    if isinstance(policy, dict) and "Fn::If" in policy:
        _, granted, otherwise = policy["Fn::If"]
        assert otherwise == {"Ref": "AWS::NoValue"}, policy
        return granted
    return policy


def every_template(template: Template) -> Iterator[dict[str, Any]]:
    """template.yaml's data, then each nested stack's, depth first."""
    yield template.data
    for nested in template.nested.values():
        yield from every_template(nested)


def test_no_policy_grants_wildcard_actions(template: Template) -> None:
    policy_templates = sam_policy_templates()
    checked: list[str] = []
    for logical_id, resource in ((k, r) for data in every_template(template) for k, r in data["Resources"].items()):
        properties = resource.get("Properties", {})
        documents: list[dict[str, Any]] = []
        if resource["Type"] == "AWS::Serverless::Function":
            for policy in map(unconditional, properties.get("Policies", [])):
                if policy is None:
                    continue
                # A bare string is a managed policy: never as narrow as a template.
                assert isinstance(policy, dict), f"{logical_id}: managed policy {policy!r}"
                if "Statement" in policy:
                    documents.append(policy)
                    continue
                (name,) = policy
                assert name in policy_templates, f"{logical_id}: {name} is no SAM policy template"
                documents.append({"Statement": [{"Action": policy_templates[name]}]})
        elif resource["Type"] == "AWS::IAM::Role":
            assert "ManagedPolicyArns" not in properties, logical_id
            documents = [p["PolicyDocument"] for p in properties.get("Policies", [])]
        elif resource["Type"] in {"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"}:
            documents = [properties["PolicyDocument"]]
        for document in documents:
            for statement in statements(document):
                for action in actions(statement):
                    assert action != "*", logical_id
                    assert not action.endswith(":*"), f"{logical_id}: {action}"
                    checked.append(action)
    assert "sqs:SendMessage*" in checked
    assert "secretsmanager:GetSecretValue" in checked


class NoManagedPolicies:
    """SAM's transform asks for the account's managed policies; offline there are none."""

    def load(self) -> dict[str, str]:
        return {}


# The only statements with Resource "*": AWS managed policies SAM attaches to every
# function's role, each needed for a reason of its own.
JUSTIFIED_MANAGED_POLICIES = {
    # The function's logs (Lambda's own use of the role); SAM attaches it to every role it makes.
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
    # VpcConfig: Lambda creates the network interfaces, which have no ARN before they exist.
    "arn:aws:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole",
    # Tracing: Active; X-Ray's PutTraceSegments has no resource-level permissions.
    "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
}


@pytest.fixture(scope="module")
def transformed() -> dict[str, Any]:
    """What SAM's transform makes of the template, run offline with SAM's translator."""
    template = yaml_parse(TEMPLATE.read_text(encoding="utf-8"))
    for resource in template["Resources"].values():
        for key in ("CodeUri", "ContentUri"):
            if key in resource.get("Properties", {}):
                resource["Properties"][key] = "s3://bucket/key"  # the transform wants code in S3
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_DEFAULT_REGION", "us-east-1")
        found: dict[str, Any] = transform(template, {}, NoManagedPolicies())
    return json.loads(json.dumps(found))  # plain JSON types, as the SAM CLI writes it


@pytest.fixture(scope="module")
def roles(transformed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each role's properties, a conditional policy (Edge) read as the one it grants."""
    return {
        name: {**r["Properties"], "Policies": [unconditional(p) for p in r["Properties"].get("Policies", [])]}
        for name, r in transformed["Resources"].items()
        if r["Type"] == "AWS::IAM::Role"
    }


def test_no_iam_statement_allows_every_resource(roles: dict[str, dict[str, Any]]) -> None:
    assert {"OrderPersisterFunctionRole", "ReconcilerFunctionRole"} <= set(roles)
    for name, role in roles.items():
        assert set(role.get("ManagedPolicyArns", [])) <= JUSTIFIED_MANAGED_POLICIES, name
        for policy in role.get("Policies", []):
            for statement in statements(policy["PolicyDocument"]):
                resource = statement["Resource"]
                assert "*" not in (resource if isinstance(resource, list) else [resource]), f"{name}: {statement}"


def test_reconciler_may_peek_at_the_dead_letter_queue_but_not_delete(
    template: Template, roles: dict[str, dict[str, Any]]
) -> None:
    assert template.functions["ReconcilerFunction"].environment["ORDER_DLQ_URL"] == {"Ref": "OrderDeadLetterQueue"}
    on_dlq = [
        statement
        for policy in roles["ReconcilerFunctionRole"]["Policies"]
        for statement in statements(policy["PolicyDocument"])
        if statement["Resource"] == {"Fn::GetAtt": ["OrderDeadLetterQueue", "Arn"]}
    ]
    assert [sorted(actions(s)) for s in on_dlq] == [
        ["sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes", "sqs:ReceiveMessage"]
    ]
    # Only the reconciler reads it; the replay script runs with an operator's credentials.
    for name, role in roles.items():
        if name != "ReconcilerFunctionRole":
            assert "OrderDeadLetterQueue" not in json.dumps(role.get("Policies", [])), name


# --- network (network/template.yaml) and data stores (data/template.yaml), nested --------------

NETWORK_STACK = "NetworkStack"


def network_output(name: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [NETWORK_STACK, f"Outputs.{name}"]}


@pytest.fixture(scope="module")
def network(template: Template) -> dict[str, Any]:
    """The network stack's template, as template.yaml names it and the runner loads it."""
    assert template.resource(NETWORK_STACK)["Properties"]["Location"] == "network/template.yaml"
    return template.nested[NETWORK_STACK].data


@pytest.fixture(scope="module")
def stores(template: Template) -> dict[str, Any]:
    """The data stack's template, as template.yaml names it and the runner loads it."""
    assert template.resource(DATA_STACK)["Properties"]["Location"] == "data/template.yaml"
    return template.nested[DATA_STACK].data


def ingress(data: dict[str, Any], group: str) -> list[dict[str, Any]]:
    rules = list(props(data, group).get("SecurityGroupIngress", []))
    for rule in resources(data, "AWS::EC2::SecurityGroupIngress").values():
        if rule["Properties"]["GroupId"] == {"Ref": group}:
            rules.append(rule["Properties"])
    return rules


def test_security_groups_allow_only_functions_to_redis_and_proxy_to_mysql(
    data: dict[str, Any], network: dict[str, Any], stores: dict[str, Any]
) -> None:
    def only(group: str, port: int, source_group: str) -> None:
        rules = ingress(network, group)
        assert [(r["FromPort"], r["ToPort"], r["SourceSecurityGroupId"]) for r in rules] == [
            (port, port, {"Ref": source_group})
        ], group
        assert all("CidrIp" not in r for r in rules)
        # The group the network stack gives for it is that group.
        assert network["Outputs"][f"{group}Id"]["Value"] == {"Ref": group}

    only("CacheSecurityGroup", 6379, "FunctionSecurityGroup")
    only("ProxySecurityGroup", 3306, "FunctionSecurityGroup")
    only("DatabaseSecurityGroup", 3306, "ProxySecurityGroup")
    assert ingress(network, "FunctionSecurityGroup") == []
    # The data stack puts each store in the group template.yaml gives it, and only there.
    given = props(data, DATA_STACK)["Parameters"]
    for group in ("CacheSecurityGroupId", "ProxySecurityGroupId", "DatabaseSecurityGroupId"):
        assert given[group] == network_output(group), group
    assert given["SubnetIds"] == network_output("SubnetIds")
    assert props(stores, "Cache")["SecurityGroupIds"] == [{"Ref": "CacheSecurityGroupId"}]
    assert props(stores, "DbProxy")["VpcSecurityGroupIds"] == [{"Ref": "ProxySecurityGroupId"}]
    assert props(stores, "Database")["VPCSecurityGroups"] == [{"Ref": "DatabaseSecurityGroupId"}]
    for store in (data, stores):
        assert not [name for name, r in store["Resources"].items() if r["Type"].startswith("AWS::EC2::")]


def test_the_network_stack_gets_the_operators_network(transformed: dict[str, Any]) -> None:
    """What the operator sets on template.yaml reaches the network stack; the same Rules keep
    an existing VPC and its subnets together."""
    given = transformed["Resources"][NETWORK_STACK]["Properties"]["Parameters"]
    for name in ("VpcCidr", "ExistingVpcId", "CreateVpcEndpoints"):
        assert given[name] == {"Ref": name}, name
    # A CommaDelimitedList passes to a nested stack as one string.
    assert given["ExistingSubnetIds"] == {"Fn::Join": [",", {"Ref": "ExistingSubnetIds"}]}
    assert {"ExistingVpcNeedsSubnets", "ExistingSubnetsNeedVpc"} <= set(transformed["Rules"])


def test_vpc_endpoints_and_no_internet_route(network: dict[str, Any]) -> None:
    data = network
    services = {
        props(data, name)["ServiceName"]["Fn::Sub"].rsplit(".", 1)[1]: props(data, name)
        for name in resources(data, "AWS::EC2::VPCEndpoint")
    }
    assert services["sqs"]["VpcEndpointType"] == "Interface"
    assert services["secretsmanager"]["VpcEndpointType"] == "Interface"
    assert services["sqs"]["PrivateDnsEnabled"] is True
    assert services["s3"]["VpcEndpointType"] == "Gateway"
    for kind in ("AWS::EC2::InternetGateway", "AWS::EC2::NatGateway", "AWS::EC2::Route"):
        assert not resources(data, kind), kind
    azs = {json.dumps(props(data, s)["AvailabilityZone"]) for s in ("PrivateSubnetA", "PrivateSubnetB")}
    assert len(azs) == 2


def test_the_data_stack_gets_the_operators_data_parameters(data: dict[str, Any], stores: dict[str, Any]) -> None:
    """What the operator sets on template.yaml reaches the data stack under the same name,
    which accepts the same values with the same default."""
    given = props(data, DATA_STACK)["Parameters"]
    passed = [name for name in stores["Parameters"] if name in data["Parameters"]]
    assert {"CacheNodeType", "CacheNodes", "DbEngineVersion", "DbInstanceClass", "DbMultiAz"} <= set(passed)
    for name in passed:
        assert given[name] == {"Ref": name}, name
        ours, theirs = data["Parameters"][name], stores["Parameters"][name]
        assert {k: v for k, v in ours.items() if k != "Description"} == {
            k: v for k, v in theirs.items() if k != "Description"
        }, name
    assert given["ServiceName"] == {"Ref": "AWS::StackName"}


def test_redis_and_mysql_are_encrypted_and_private(stores: dict[str, Any]) -> None:
    data = stores
    cache = props(data, "Cache")
    assert cache["TransitEncryptionEnabled"] is True
    assert cache["AtRestEncryptionEnabled"] is True
    db = props(data, "Database")
    assert db["Engine"] == "mysql"
    assert str(parameter_default(data, db["EngineVersion"])).startswith("8.")
    assert db["StorageEncrypted"] is True
    assert db["PubliclyAccessible"] is False
    proxy = props(data, "DbProxy")
    assert proxy["RequireTLS"] is True


def test_redis_requires_the_auth_token_from_its_secret(stores: dict[str, Any]) -> None:
    data = stores
    cache = props(data, "Cache")
    assert cache["AuthToken"] == {"Fn::Sub": "{{resolve:secretsmanager:${RedisAuthSecret}:SecretString}}"}
    assert cache["TransitEncryptionEnabled"] is True  # ElastiCache takes a token only with TLS
    generated = props(data, "RedisAuthSecret")["GenerateSecretString"]
    # A plain string (no JSON template) of 16-128 characters without / " @ % or spaces.
    assert "SecretStringTemplate" not in generated
    assert 16 <= int(generated["PasswordLength"]) <= 128
    assert generated["ExcludePunctuation"] is True
    assert not generated.get("IncludeSpace", False)


def test_mysql_credentials_are_the_secret_rds_manages_and_rotates(data: dict[str, Any], stores: dict[str, Any]) -> None:
    db = props(stores, "Database")
    assert db["ManageMasterUserPassword"] is True
    assert "MasterUserPassword" not in db
    # The default key (aws/secretsmanager) needs no kms:Decrypt grant; a key of our own would.
    assert "MasterUserSecret" not in db
    managed = {"Fn::GetAtt": ["Database", "MasterUserSecret.SecretArn"]}
    (auth,) = props(stores, "DbProxy")["Auth"]
    assert auth == {"AuthScheme": "SECRETS", "SecretArn": managed, "IAMAuth": "DISABLED"}
    (policy,) = props(stores, "DbProxyRole")["Policies"]
    assert policy["PolicyDocument"]["Statement"] == [
        {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": managed}
    ]
    # No secret of our own for MySQL (one nobody rotates) is left over.
    assert sorted(resources(data, "AWS::SecretsManager::Secret")) == [
        "OriginSecret",
        "PassKeysHeldSecret",
        "PassKeysSecret",
    ]
    assert sorted(resources(stores, "AWS::SecretsManager::Secret")) == ["RedisAuthSecret"]
    # What the functions read is that secret, and Redis's the one its token comes from.
    assert stores["Outputs"]["DbSecretArn"]["Value"] == managed
    assert stores["Outputs"]["RedisAuthSecretArn"]["Value"] == {"Ref": "RedisAuthSecret"}
    assert data["Outputs"]["DbSecretArn"]["Value"] == DB_SECRET


def test_every_function_logs_to_its_own_group_with_the_retention(data: dict[str, Any]) -> None:
    groups = resources(data, "AWS::Logs::LogGroup")
    for logical_id, resource in resources(data, "AWS::Serverless::Function").items():
        fn = resource["Properties"]
        name = fn["FunctionName"]["Fn::Sub"]
        assert name.startswith("${AWS::StackName}-"), logical_id
        assert len(name.removeprefix("${AWS::StackName}")) <= 7, "with DbProxyName's limit, fits Lambda's 64"
        group = groups[fn["LoggingConfig"]["LogGroup"]["Ref"]]
        assert group["Properties"]["LogGroupName"] == {"Fn::Sub": f"/aws/lambda/{name}"}, logical_id
        assert group.get("Condition") == resource.get("Condition"), logical_id
    for logical_id, group in groups.items():
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, logical_id


def test_schema_is_applied_by_the_migrator_custom_resource(template: Template, data: dict[str, Any]) -> None:
    (logical_id,) = [name for name, r in data["Resources"].items() if r["Type"].startswith("Custom::")]
    resource = data["Resources"][logical_id]
    properties = resource["Properties"]
    assert properties["ServiceToken"] == {"Fn::GetAtt": ["MigratorFunction", "Arn"]}
    # CloudFormation gives up after ServiceTimeout even if no reply ever comes.
    assert template.functions["MigratorFunction"].timeout < int(properties["ServiceTimeout"]) <= 3600
    # After the data stack, whose outputs exist once the proxy has its target.
    assert resource["DependsOn"] == DATA_STACK
    assert properties["Layer"] == {"Ref": "SeckillLayer"}  # a new schema.sql re-runs it
    # Its reply goes to S3 and its secret comes through Secrets Manager: it waits for the
    # network stack, whose outputs exist once its endpoints do.
    assert properties["Network"] == network_output("EndpointIds")
    code = source(template.functions["MigratorFunction"])
    assert "migrate(" in code
    assert "ResponseURL" in code


def test_every_function_reading_mysql_waits_for_the_schema(data: dict[str, Any]) -> None:
    """On an update, CloudFormation migrates before it changes any function's code: new
    code never meets the old schema's tables and columns."""
    readers = [
        name
        for name, r in data["Resources"].items()
        if r["Type"] == "AWS::Serverless::Function"
        and name != "MigratorFunction"
        and "DbSecretArn" in json.dumps(r["Properties"].get("Policies", []))
    ]
    assert len(readers) == 5
    for name in readers:
        assert data["Resources"][name].get("DependsOn") == "Schema", name


def test_http_api_auth_throttling_and_access_logs(data: dict[str, Any]) -> None:
    api = props(data, "SeckillHttpApi")
    assert api["Auth"]["EnableIamAuthorizer"] is True
    authorizer = api["Auth"]["Authorizers"][api["Auth"]["DefaultAuthorizer"]]
    # Its alias, so that ColdStartMitigation applies, as an ARN naming the function (what
    # sam local start-api resolves); API Gateway is allowed to invoke it.
    assert authorizer["FunctionArn"] == {"Fn::Sub": AUTHORIZER_ALIAS_ARN}
    assert authorizer["EnableFunctionDefaultPermissions"] is True
    assert data["Resources"]["SeckillHttpApi"]["DependsOn"] == "AuthorizerFunctionAliaslive"
    # A logged-out token stops working within 30 s. With the edge nothing is cached: a
    # cached answer keyed by the token would let a direct call around the edge.
    assert authorizer["Identity"] == {"Headers": ["authorization"], "ReauthorizeEvery": {"Fn::If": ["HasEdge", 0, 30]}}
    assert {"ThrottlingBurstLimit", "ThrottlingRateLimit"} <= set(api["DefaultRouteSettings"])
    assert api["AccessLogSettings"]["DestinationArn"] == {"Fn::GetAtt": ["ApiAccessLogs", "Arn"]}
    json.loads(api["AccessLogSettings"]["Format"])


def test_admin_routes_are_iam_authorized(template: Template) -> None:
    auth = {(route.method, route.path): route.auth for route, _ in template.routes()}
    # The payment service's route too: it calls as the admin client does, signed.
    for admin in (
        "/voucher",
        "/voucher/seckill",
        "/voucher/seckill/{voucherId}/stop",
        "/voucher-order/{orderId}/payment",
    ):
        assert auth[("POST", admin)] == "AWS_IAM", admin
    # A buyer cancels with their own token.
    assert auth[("POST", "/voucher-order/{orderId}/cancel")] == "default"
    stop = next(route for route, _ in template.routes() if route.path.endswith("/stop"))
    assert stop.match("POST", "/voucher/seckill/42/stop") == {"voucherId": "42"}


def test_every_checkov_skip_is_justified(template: Template) -> None:
    skipped = 0
    for logical_id, resource in ((k, r) for data in every_template(template) for k, r in data["Resources"].items()):
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
            assert re.fullmatch(r"CKV2?_AWS_\d+", skip["id"]), logical_id
            assert len(skip.get("comment", "")) > 20, f"{logical_id}: say why {skip['id']} does not apply"
            skipped += 1
    assert skipped, "the scan's exceptions live beside their resources"


def test_layer_is_built_by_sam_with_the_lua_scripts(data: dict[str, Any]) -> None:
    layer = data["Resources"]["SeckillLayer"]
    assert layer["Properties"]["ContentUri"] == "layers/"
    assert layer["Metadata"]["BuildMethod"] == "makefile"
    assert "build-SeckillLayer:" in (ROOT / "layers" / "Makefile").read_text(encoding="utf-8")
    # The link makes sam's copy and its cache checksum include the scripts.
    link = ROOT / "layers" / "lua"
    assert link.is_symlink()
    assert link.resolve() == (ROOT / "lua").resolve()


def test_outputs_an_operator_needs(data: dict[str, Any]) -> None:
    outputs = data["Outputs"]
    assert outputs["ApiEndpoint"]["Value"]["Fn::Sub"].startswith("https://${SeckillHttpApi}.execute-api.")
    # The names the tools read (seckill-dlq-replay, seckill-flash-sale --stack-name) are the template's.
    for queue, output in stack_outputs.QUEUE_URLS.items():
        assert outputs[output]["Value"] == {"Ref": queue}
    assert {stack_outputs.ORDER_QUEUE_URL, stack_outputs.DLQ_URL} <= set(stack_outputs.QUEUE_URLS.values())
    assert outputs[stack_outputs.MINTER_FUNCTION_NAME]["Value"] == {"Ref": "TokenMinterFunction"}


# --- the sale's first second: ColdStartMitigation ----------------------------------------------

REQUEST_PATH = ("SeckillApiFunction", "AuthorizerFunction")
AUTHORIZER_ALIAS_ARN = (
    "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AuthorizerFunction}:live"
)
MITIGATIONS = ("none", "provisioned", "snapstart")


def evaluate(value: Any, data: dict[str, Any], parameters: dict[str, str]) -> Any:
    """A template value with its conditions, ``If``s and parameter ``Ref``s resolved."""
    if isinstance(value, list):
        return [evaluate(v, data, parameters) for v in value]
    if not isinstance(value, dict):
        return value
    if "Ref" in value and value["Ref"] in parameters:  # a parameter or a pseudo parameter (AWS::Region)
        return parameters[value["Ref"]]
    if "Ref" in value and value["Ref"] in data["Parameters"]:
        return data["Parameters"][value["Ref"]].get("Default")
    if "Condition" in value and len(value) == 1:
        return evaluate(data["Conditions"][value["Condition"]], data, parameters)
    if "Fn::Equals" in value:
        left, right = evaluate(value["Fn::Equals"], data, parameters)
        return left == right
    if "Fn::Not" in value:
        return not evaluate(value["Fn::Not"][0], data, parameters)
    if "Fn::And" in value:
        return all(evaluate(value["Fn::And"], data, parameters))
    if "Fn::Or" in value:
        return any(evaluate(value["Fn::Or"], data, parameters))
    if "Fn::If" in value:
        condition, then, otherwise = value["Fn::If"]
        chosen = then if evaluate({"Condition": condition}, data, parameters) else otherwise
        return evaluate(chosen, data, parameters)
    return {k: evaluate(v, data, parameters) for k, v in value.items()}


def deployed(transformed: dict[str, Any], mitigation: str) -> dict[str, dict[str, Any]]:
    """The resources a stack with ColdStartMitigation=mitigation has, properties resolved."""
    parameters = {"ColdStartMitigation": mitigation}
    return {
        name: {**resource, "Properties": evaluate(resource.get("Properties", {}), transformed, parameters)}
        for name, resource in transformed["Resources"].items()
        if "Condition" not in resource or evaluate({"Condition": resource["Condition"]}, transformed, parameters)
    }


def test_cold_start_mitigation_is_one_choice_off_by_default(data: dict[str, Any]) -> None:
    parameter = data["Parameters"]["ColdStartMitigation"]
    assert parameter["Default"] == "none"
    assert parameter["AllowedValues"] == list(MITIGATIONS)
    # Provisioned concurrency costs for every warm hour, SnapStart per GB cached and restored.
    assert "billed" in parameter["Description"]


@pytest.mark.parametrize("mitigation", MITIGATIONS)
def test_each_choice_deploys_only_its_own_resources(transformed: dict[str, Any], mitigation: str) -> None:
    resources = deployed(transformed, mitigation)
    targets = {n: r["Properties"] for n, r in resources.items() if r["Type"].endswith("::ScalableTarget")}
    for logical_id in REQUEST_PATH:
        function = resources[logical_id]["Properties"]
        # SnapStart and provisioned concurrency never meet on one version (AWS refuses it).
        snapshotted = function["SnapStart"]["ApplyOn"] == "PublishedVersions"
        assert snapshotted == (mitigation == "snapstart"), logical_id
        assert "ProvisionedConcurrencyConfig" not in function
        alias = resources[f"{logical_id}Aliaslive"]["Properties"]
        assert alias["FunctionVersion"]["Fn::GetAtt"][0] in resources  # a version published from the function
        warm = [t for t in targets.values() if t["ResourceId"] == {"Fn::Sub": f"function:${{{logical_id}}}:live"}]
        assert len(warm) == (mitigation == "provisioned"), logical_id
    if mitigation != "provisioned":
        assert targets == {}


def test_provisioned_concurrency_follows_the_sale_window(transformed: dict[str, Any], data: dict[str, Any]) -> None:
    resources = deployed(transformed, "provisioned")
    for name in ("SeckillApiWarmTarget", "AuthorizerWarmTarget"):
        target = resources[name]["Properties"]
        assert (target["ServiceNamespace"], target["ScalableDimension"]) == (
            "lambda",
            "lambda:function:ProvisionedConcurrency",
        )
        amount = int(data["Parameters"]["SaleWarmConcurrency"]["Default"])
        assert (target["MinCapacity"], target["MaxCapacity"]) == (0, amount)
        actions = {a["ScheduledActionName"]: a for a in target["ScheduledActions"]}
        start, end = actions["warm-before-sale"], actions["release-after-sale"]
        assert start["Schedule"] == data["Parameters"]["SaleWarmStart"]["Default"]
        assert end["Schedule"] == data["Parameters"]["SaleWarmEnd"]["Default"]
        assert start["ScalableTargetAction"] == {"MinCapacity": amount, "MaxCapacity": amount}
        assert end["ScalableTargetAction"] == {"MinCapacity": 0, "MaxCapacity": 0}
        assert start["Timezone"] == end["Timezone"] == data["Parameters"]["SeckillTimezone"]["Default"]
        # The alias must exist before a target can name it.
        assert transformed["Resources"][name]["DependsOn"].endswith("Aliaslive")


def test_api_gateway_invokes_the_aliases(transformed: dict[str, Any]) -> None:
    """The versions ColdStartMitigation warms or snapshots are the ones requests reach."""
    body = json.dumps(transformed["Resources"]["SeckillHttpApi"]["Properties"]["Body"])
    assert "${SeckillApiFunctionAliaslive}" in body
    assert "${SeckillApiFunction.Arn}" not in body
    assert "function:${AuthorizerFunction}:live" in body
    permissions = {
        name: r["Properties"]
        for name, r in transformed["Resources"].items()
        if r["Type"] == "AWS::Lambda::Permission" and r["Properties"]["Principal"] == "apigateway.amazonaws.com"
    }
    invoked = {json.dumps(p["FunctionName"]) for p in permissions.values()}
    assert invoked == {
        json.dumps({"Ref": "SeckillApiFunctionAliaslive"}),
        json.dumps({"Fn::Sub": AUTHORIZER_ALIAS_ARN}),
    }
    # The authorizer's permission names the API, which waits for the alias: never created before it.
    (authorizer,) = [p for p in permissions.values() if "authorizers" in json.dumps(p["SourceArn"])]
    assert {"Ref": "SeckillHttpApi"} in authorizer["SourceArn"]["Fn::Sub"][1].values()
    assert transformed["Resources"]["SeckillHttpApi"]["DependsOn"] == "AuthorizerFunctionAliaslive"


# --- events/ and the env-vars files -----------------------------------------------------------------


def events() -> dict[str, Any]:
    return {path.name: json.loads(path.read_text(encoding="utf-8")) for path in sorted(EVENTS.glob("*.json"))}


def test_events_cover_every_function(template: Template) -> None:
    names = [name for name in events() if not name.startswith("env")]
    for fn in template.functions.values():
        prefix = fn.code_uri.name  # functions/seckill_api -> events/seckill_api*.json
        assert any(name.startswith(prefix) for name in names), f"no events/{prefix}*.json for {fn.logical_id}"


def test_events_cover_every_route_with_its_auth(template: Template) -> None:
    by_route = {e["routeKey"]: e for e in events().values() if "routeKey" in e and "requestContext" in e}
    for route, fn in template.routes():
        event = by_route.get(f"{route.method} {route.path}")
        assert event is not None, f"no event for {route.method} {route.path}"
        assert route.match(event["requestContext"]["http"]["method"], event["rawPath"]) is not None
        authorizer = event["requestContext"].get("authorizer") or {}
        if route.auth == "AWS_IAM":
            assert "iam" in authorizer, route.path
        elif route.auth == "NONE":
            assert authorizer == {}, route.path
        elif fn.logical_id != "AuthorizerFunction":
            assert "userId" in authorizer.get("lambda", {}), route.path


def test_event_shapes_match_their_sources(template: Template) -> None:
    all_events = events()
    for prefix in ("order_persister", "order_expiry"):
        sqs_events = [e for name, e in all_events.items() if name.startswith(prefix)]
        assert sqs_events, prefix
        assert all(r["eventSource"] == "aws:sqs" for e in sqs_events for r in e["Records"])
    assert all_events["authorizer.json"]["type"] == "REQUEST"
    assert "authorization" in all_events["authorizer.json"]["headers"]
    custom = {e["RequestType"]: e for name, e in all_events.items() if name.startswith("migrator")}
    assert {"Create", "Delete"} <= set(custom)
    for event in custom.values():
        assert {"ResponseURL", "StackId", "RequestId", "LogicalResourceId", "ResourceType"} <= set(event)
    assert isinstance(all_events["token_minter.json"]["userIds"], list)


# The local edge's store stand-in: `seckill-local start-api --edge` gives its endpoint.
# Without it EDGE_STATE_QUEUE_URL is empty (the env-vars files say so): nothing is
# queued for the publisher, which then never needs the store.
EDGE_LOCAL = {"AWS_ENDPOINT_URL_CLOUDFRONT_KEYVALUESTORE"}


def unresolvable(template: Template, fn: Function) -> set[str]:
    """Variables whose template value neither the runner nor sam local can work out
    (resource attributes, AWS::NoValue): an env-vars file must give them."""
    return {name for name, value in fn.environment.items() if template.resolve(value, {}) is None}


@pytest.mark.parametrize("env_file", ["env.json", "env.docker.json"])
def test_env_vars_files_name_real_functions(template: Template, env_file: str) -> None:
    data = json.loads((EVENTS / env_file).read_text(encoding="utf-8"))
    assert set(data) <= {"Parameters", *template.functions}


def test_docker_env_vars_give_every_variable_sam_local_cannot_resolve(template: Template) -> None:
    data = json.loads((EVENTS / "env.docker.json").read_text(encoding="utf-8"))
    for fn in template.functions.values():
        given = set(data["Parameters"]) | set(data.get(fn.logical_id, {}))
        missing = unresolvable(template, fn) - given - EDGE_LOCAL
        assert not missing, f"{fn.logical_id}: env.docker.json lacks {sorted(missing)}"
    assert "host.docker.internal" in data["Parameters"]["REDIS_URL"]


def test_docker_env_vars_name_only_what_the_functions_declare(template: Template) -> None:
    """sam local sets only the variables a function declares: any other name in the file is dropped unseen."""
    data = json.loads((EVENTS / "env.docker.json").read_text(encoding="utf-8"))
    declared = {name for fn in template.functions.values() for name in fn.environment}
    assert set(data["Parameters"]) <= declared, set(data["Parameters"]) - declared
    for logical_id, variables in data.items():
        if logical_id != "Parameters":
            own = set(template.functions[logical_id].environment)
            assert set(variables) <= own, f"{logical_id}: {sorted(set(variables) - own)} not declared"


def test_docker_env_vars_give_each_function_the_queue_its_variable_names(template: Template) -> None:
    data = json.loads((EVENTS / "env.docker.json").read_text(encoding="utf-8"))
    queues = 0
    for logical_id, variables in data.items():
        if logical_id == "Parameters":
            continue
        for name, value in variables.items():
            declared = template.functions[logical_id].environment[name]
            if isinstance(declared, dict) and declared.get("Ref") in template.queues():
                queues += 1
                assert value.startswith("http://host.docker.internal:"), value
                assert value.rsplit("/", 1)[1] == declared["Ref"], f"{logical_id} {name}={value}"
    assert queues >= 4  # the API's and the reconciler's OrderQueue, the DLQ, the poison queue


def test_runner_env_vars_give_what_the_runner_cannot_resolve(template: Template) -> None:
    data = json.loads((EVENTS / "env.json").read_text(encoding="utf-8"))
    # The runner supplies the SQS endpoint itself; DB_USER/DB_PASSWORD have defaults.
    own = {"AWS_ENDPOINT_URL_SQS", "DB_USER", "DB_PASSWORD", *EDGE_LOCAL}
    for fn in template.functions.values():
        given = set(data["Parameters"]) | set(data.get(fn.logical_id, {}))
        missing = unresolvable(template, fn) - given - own
        assert not missing, f"{fn.logical_id}: env.json lacks {sorted(missing)}"


# --- samconfig.toml -----------------------------------------------------------------------------------


def test_samconfig_defaults_and_a_second_environment() -> None:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text(encoding="utf-8"))
    default, prod = config["default"], config["prod"]
    assert default["build"]["parameters"]["cached"] is True
    assert default["build"]["parameters"]["parallel"] is True
    assert default["validate"]["parameters"]["lint"] is True
    assert "CAPABILITY_IAM" in default["deploy"]["parameters"]["capabilities"]
    assert prod["global"]["parameters"]["stack_name"] != default["global"]["parameters"]["stack_name"]
    overrides = prod["deploy"]["parameters"]["parameter_overrides"]
    template_parameters = set(Template.load().data["Parameters"])
    for pair in overrides.split():
        assert pair.split("=", 1)[0] in template_parameters, pair
