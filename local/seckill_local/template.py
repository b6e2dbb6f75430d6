"""What the local runner needs from ``template.yaml``: functions, routes, queues, and the
nested stacks whose template is a local file (the edge, edge/template.yaml)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from seckill_local.checkout import TEMPLATE


class _CfnLoader(yaml.SafeLoader):
    """Reads CloudFormation short forms (!Ref, !GetAtt, !Sub...) as their long forms."""


def _intrinsic(loader: _CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CfnLoader.add_multi_constructor("!", lambda loader, suffix, node: _intrinsic(loader, suffix, node))


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # as in the template: /voucher-order/{orderId}
    auth: str  # "default" (the API's authorizer), "NONE" or "AWS_IAM"
    pattern: re.Pattern[str]

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if method.upper() != self.method:
            return None
        found = self.pattern.fullmatch(path)
        return found.groupdict() if found else None


@dataclass(frozen=True)
class Function:
    logical_id: str
    code_uri: Path
    handler: str
    timeout: int
    environment: dict[str, Any]
    routes: list[Route] = field(default_factory=list)
    sqs_events: list[dict[str, Any]] = field(default_factory=list)
    schedules: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Template:
    data: dict[str, Any]
    functions: dict[str, Function]
    parameters: dict[str, str]
    # Each AWS::Serverless::Application whose Location is a file beside this template, loaded.
    nested: dict[str, Template] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path = TEMPLATE) -> Template:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_CfnLoader)  # noqa: S506 (safe subclass)
        globals_ = data.get("Globals", {}).get("Function", {})
        parameters = {k: str(v.get("Default", "")) for k, v in data.get("Parameters", {}).items()}
        functions: dict[str, Function] = {}
        mappings = _queue_mappings(data)
        for logical_id, resource in data.get("Resources", {}).items():
            if resource.get("Type") != "AWS::Serverless::Function":
                continue
            props = resource.get("Properties", {})
            env = dict(globals_.get("Environment", {}).get("Variables", {}))
            env.update(props.get("Environment", {}).get("Variables", {}))
            routes, schedules = [], []
            sqs_events = list(mappings.get(logical_id, []))
            for event in props.get("Events", {}).values():
                if event.get("Type") == "HttpApi":
                    p = event["Properties"]
                    auth = (p.get("Auth") or {}).get("Authorizer", "default")
                    routes.append(_route(p["Method"], p["Path"], auth))
                elif event.get("Type") == "SQS":
                    sqs_events.append(event["Properties"])
                elif event.get("Type") in {"Schedule", "ScheduleV2"}:
                    schedules.append(event["Properties"])
            functions[logical_id] = Function(
                logical_id=logical_id,
                code_uri=(path.parent / props["CodeUri"]).resolve(),
                handler=props.get("Handler", globals_.get("Handler", "app.lambda_handler")),
                timeout=int(props.get("Timeout", globals_.get("Timeout", 3))),
                environment=env,
                routes=routes,
                sqs_events=sqs_events,
                schedules=schedules,
            )
        nested = {
            logical_id: cls.load((path.parent / resource["Properties"]["Location"]).resolve())
            for logical_id, resource in data.get("Resources", {}).items()
            if resource.get("Type") == "AWS::Serverless::Application"
            and isinstance(resource.get("Properties", {}).get("Location"), str)
            and "://" not in resource["Properties"]["Location"]
        }
        return cls(data, functions, parameters, nested)

    def resource(self, logical_id: str) -> dict[str, Any]:
        return self.data["Resources"][logical_id]

    def queues(self) -> list[str]:
        return [k for k, v in self.data["Resources"].items() if v.get("Type") == "AWS::SQS::Queue"]

    def authorizer(self) -> tuple[str, int] | None:
        """The HTTP API's default Lambda authorizer: (function logical id, cache seconds)."""
        for resource in self.data["Resources"].values():
            if resource.get("Type") != "AWS::Serverless::HttpApi":
                continue
            auth = resource.get("Properties", {}).get("Auth", {})
            default = auth.get("DefaultAuthorizer")
            if not default:
                return None
            spec = auth["Authorizers"][default]
            ttl = spec.get("Identity", {}).get("ReauthorizeEvery", 0)
            if isinstance(ttl, dict):
                # !If [HasEdge, 0, 30]: the longer; the local cache is keyed by the origin header too.
                ttl = max(int(branch) for branch in ttl["Fn::If"][1:])
            return self._function_of(spec["FunctionArn"]), int(ttl)
        return None

    def _function_of(self, arn: dict[str, Any]) -> str:
        """The function an ARN names, as sam local reads it: ``!Sub arn:...:function:${Fn}``,
        optionally with a qualifier (``:live``, the alias; locally it runs the same code)."""
        named = re.fullmatch(r"arn:.*:function:\$\{(\w+)\}(?::[\w-]+)?", str(arn.get("Fn::Sub", "")))
        if named is None or named.group(1) not in self.functions:
            raise ValueError(f"the authorizer's FunctionArn names no function of the template: {arn}")
        return named.group(1)

    def routes(self) -> list[tuple[Route, Function]]:
        return [(route, fn) for fn in self.functions.values() for route in fn.routes]

    def resolve(self, value: Any, refs: dict[str, str]) -> str | None:
        """A template value as a string, with !Ref taken from ``refs`` then parameters;
        None when it cannot be resolved locally."""
        if isinstance(value, dict):
            if "Ref" in value:
                name = value["Ref"]
                if name in refs:
                    return refs[name]
                return self.parameters.get(name)
            return None
        return None if value is None else str(value)


def _queue_mappings(data: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """SQS event source mappings declared as AWS::Lambda::EventSourceMapping, by the
    function they feed, in the shape of a SAM SQS event's properties (``Queue``...)."""
    mappings: dict[str, list[dict[str, Any]]] = {}
    for resource in data.get("Resources", {}).values():
        if resource.get("Type") != "AWS::Lambda::EventSourceMapping":
            continue
        props = dict(resource.get("Properties", {}))
        function, source = props.pop("FunctionName", None), props.pop("EventSourceArn", None)
        target = function.get("Ref") if isinstance(function, dict) else None
        queue = source.get("Fn::GetAtt", [""])[0] if isinstance(source, dict) else ""
        if target and data["Resources"].get(queue, {}).get("Type") == "AWS::SQS::Queue":
            mappings.setdefault(target, []).append({"Queue": source, **props})
    return mappings


def _route(method: str, path: str, auth: str) -> Route:
    regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(path))
    return Route(method.upper(), path, auth, re.compile(regex))
