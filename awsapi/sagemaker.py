"""A SageMaker CreateTrainingJob request (`serviceRequestPayload`) read as a quotaportal submission: the
preference list from `ResourceConfig`, the pending limit from `StoppingCondition`, the command and its
variables from `AlgorithmSpecification` and `Environment`. Every refusal names the member path."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from awsapi import arns
from awsapi.errors import invalid
from awsapi.operations.common import instance_type_named
from scheduling import rules
from scheduling.models import MAX_PREFERENCES, TrainingPlan

ROOT = "serviceRequestPayload"
RC = f"{ROOT}.ResourceConfig"
COMMAND_VARIABLE = "QUOTAPORTAL_COMMAND"
_ENV_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# The SageMaker SDK's own driver, which runs code it uploaded to S3: it says nothing of the user's command.
_SDK_DRIVER = "sm_drivers/sm_train.sh"


@dataclass
class TrainingRequest:
    preferences: list[rules.PreferenceInput]
    # quotaportal's field -> the AWS member path, for errors the submission rules raise
    paths: dict[str, str]
    training_job_name: str
    max_pending_seconds: int | None = None
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    hyperparameters: dict[str, str] = field(default_factory=dict)
    image: str | None = None


def _obj(value, path: str) -> dict:
    if not isinstance(value, dict):
        raise invalid(path, "must be a JSON object")
    return value


def _int(value, path: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(path, "must be an integer")
    if not low <= value <= high:
        raise invalid(path, f"must be between {low} and {high}, got {value}")
    return value


def _plan(arn, path: str) -> TrainingPlan:
    if not isinstance(arn, str):
        raise invalid(path, "must be a training plan ARN")
    name = arns.plan_name_of(arn, path=path)
    plan = TrainingPlan.objects.select_related("instance_type").filter(name=name).first()
    if plan is None:
        raise invalid(path, f"no training plan {name}")
    return plan


def _strings(value, path: str, *, high: int = 100, max_len: int = 256) -> list[str]:
    if not isinstance(value, list) or not 1 <= len(value) <= high:
        raise invalid(path, f"must be a list of 1 to {high} strings")
    for index, item in enumerate(value):
        if not isinstance(item, str) or len(item) > max_len or "\x00" in item:
            raise invalid(f"{path}[{index}]", f"must be a string of at most {max_len} characters")
    return value


def training_request(text: str) -> TrainingRequest:
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise invalid(ROOT, f"is not valid JSON ({exc})") from None
    payload = _obj(payload, ROOT)
    resource = _obj(payload.get("ResourceConfig"), RC) if "ResourceConfig" in payload else None
    if resource is None:
        raise invalid(RC, "is required: it names the instance type(s) the job runs on")
    for name, why in (
        ("InstanceGroups", "heterogeneous clusters; a job runs on one instance type at a time"),
        ("InstancePlacementConfig", "instance placement configuration"),
        ("KeepAlivePeriodInSeconds", "warm pools"),
    ):
        if resource.get(name) not in (None, [], {}):
            raise invalid(f"{RC}.{name}", f"not supported by quotaportal: {why}")
    if payload.get("EnableManagedSpotTraining"):
        raise invalid(f"{ROOT}.EnableManagedSpotTraining", "not supported by quotaportal: spot capacity")
    preferences, paths = _preferences(resource)
    name = payload.get("TrainingJobName")
    if name is not None and (not isinstance(name, str) or not 1 <= len(name) <= 63):
        raise invalid(f"{ROOT}.TrainingJobName", "must be a string of 1 to 63 characters")
    request = TrainingRequest(preferences=preferences, paths=paths, training_job_name=name or "")
    stopping = payload.get("StoppingCondition")
    if stopping is not None:
        stopping = _obj(stopping, f"{ROOT}.StoppingCondition")
        pending = stopping.get("MaxPendingTimeInSeconds")
        if pending is not None:
            request.max_pending_seconds = _int(
                pending, f"{ROOT}.StoppingCondition.MaxPendingTimeInSeconds", 1800, 2_419_200
            )
    _command(payload, request)
    return request


def _preferences(resource: dict) -> tuple[list[rules.PreferenceInput], dict[str, str]]:
    job_plan_arn = resource.get("TrainingPlanArn")
    count = resource.get("InstanceCount")
    prefs = resource.get("InstancePreferences")
    if prefs is not None:
        path = f"{RC}.InstancePreferences"
        if resource.get("InstanceType") is not None:
            raise invalid(path, "give either InstancePreferences or InstanceType, not both")
        if not isinstance(prefs, list) or not 1 <= len(prefs) <= MAX_PREFERENCES:
            got = len(prefs) if isinstance(prefs, list) else "not a list"
            raise invalid(path, f"must list 1 to {MAX_PREFERENCES} instance preferences, got {got}")
        counted = [isinstance(pref, dict) and pref.get("InstanceCount") is not None for pref in prefs]
        if any(counted) and not all(counted):
            raise invalid(
                path, "give InstanceCount on every preference or on none (then ResourceConfig.InstanceCount)"
            )
        if any(counted) and count is not None:
            raise invalid(
                f"{RC}.InstanceCount", "is not allowed when the preferences give their own InstanceCount"
            )
        if not any(counted) and count is None:
            raise invalid(f"{RC}.InstanceCount", "is required when the preferences give no InstanceCount")
        shared_plan = _plan(job_plan_arn, f"{RC}.TrainingPlanArn") if job_plan_arn is not None else None
        entries, seen = [], {}
        for index, pref in enumerate(prefs):
            at = f"{path}[{index}]"
            pref = _obj(pref, at)
            unknown = sorted(set(pref) - {"InstanceType", "InstanceCount", "TrainingPlanArns"})
            if unknown:
                raise invalid(f"{at}.{unknown[0]}", "unknown member")
            type_name = pref.get("InstanceType")
            if not isinstance(type_name, str):
                raise invalid(f"{at}.InstanceType", "is required")
            if type_name in seen:
                raise invalid(f"{at}.InstanceType", f"{type_name} repeats preference [{seen[type_name]}]")
            seen[type_name] = index
            instance_type = instance_type_named(type_name, f"{at}.InstanceType")
            entry_count = _int(
                pref["InstanceCount"] if counted[index] else count,
                f"{at}.InstanceCount" if counted[index] else f"{RC}.InstanceCount",
                1,
                100_000,
            )
            plan = shared_plan
            plans = pref.get("TrainingPlanArns")
            if plans is not None:
                if shared_plan is not None:
                    raise invalid(f"{at}.TrainingPlanArns", "not allowed with ResourceConfig.TrainingPlanArn")
                if not isinstance(plans, list) or len(plans) != 1:
                    raise invalid(f"{at}.TrainingPlanArns", "must list exactly one training plan ARN")
                plan = _plan(plans[0], f"{at}.TrainingPlanArns[0]")
            entries.append(rules.PreferenceInput(instance_type, entry_count, plan))
        paths = {
            "instance_preferences": path,
            "instance_type": "InstanceType",
            "instance_count": "InstanceCount",
            "training_plan": "TrainingPlanArns",
        }
        return entries, paths
    type_name = resource.get("InstanceType")
    if not isinstance(type_name, str):
        raise invalid(f"{RC}.InstanceType", "is required (or give InstancePreferences)")
    instance_type = instance_type_named(type_name, f"{RC}.InstanceType")
    entry_count = _int(count, f"{RC}.InstanceCount", 1, 100_000) if count is not None else None
    if entry_count is None:
        raise invalid(f"{RC}.InstanceCount", "is required")
    plan = _plan(job_plan_arn, f"{RC}.TrainingPlanArn") if job_plan_arn is not None else None
    paths = {
        "instance_preferences[0].instance_type": f"{RC}.InstanceType",
        "instance_preferences[0].instance_count": f"{RC}.InstanceCount",
        "instance_preferences[0].training_plan": f"{RC}.TrainingPlanArn",
        "instance_preferences": RC,
    }
    return [rules.PreferenceInput(instance_type, entry_count, plan)], paths


def _command(payload: dict, request: TrainingRequest) -> None:
    spec = payload.get("AlgorithmSpecification")
    at = f"{ROOT}.AlgorithmSpecification"
    entrypoint = arguments = None
    if spec is not None:
        spec = _obj(spec, at)
        image = spec.get("TrainingImage")
        if image is not None and not isinstance(image, str):
            raise invalid(f"{at}.TrainingImage", "must be a string")
        request.image = image
        if spec.get("ContainerEntrypoint") is not None:
            entrypoint = _strings(spec["ContainerEntrypoint"], f"{at}.ContainerEntrypoint")
        if spec.get("ContainerArguments") is not None:
            arguments = _strings(spec["ContainerArguments"], f"{at}.ContainerArguments")
    env = payload.get("Environment")
    if env is not None:
        env = _obj(env, f"{ROOT}.Environment")
        if len(env) > 100:
            raise invalid(f"{ROOT}.Environment", f"at most 100 variables, got {len(env)}")
        for name, value in env.items():
            if not _ENV_NAME.match(name) or len(name) > 512:
                raise invalid(
                    f"{ROOT}.Environment.{name}", "a variable name is [a-zA-Z_][a-zA-Z0-9_]*, at most 512"
                )
            if not isinstance(value, str) or len(value) > 512 or "\x00" in value:
                raise invalid(f"{ROOT}.Environment.{name}", "must be a string of at most 512 characters")
        request.env = dict(env)
    hyperparameters = payload.get("HyperParameters")
    if hyperparameters is not None:
        hyperparameters = _obj(hyperparameters, f"{ROOT}.HyperParameters")
        if not all(isinstance(value, str) for value in hyperparameters.values()):
            raise invalid(f"{ROOT}.HyperParameters", "values must be strings")
        request.hyperparameters = dict(hyperparameters)
    sdk_driver = entrypoint == ["/bin/bash"] and any(_SDK_DRIVER in argument for argument in arguments or [])
    if entrypoint is not None and not sdk_driver:
        request.command = [*entrypoint, *(arguments or [])]
    elif COMMAND_VARIABLE in request.env:
        try:
            command = shlex.split(request.env[COMMAND_VARIABLE])
        except ValueError as exc:
            raise invalid(
                f"{ROOT}.Environment.{COMMAND_VARIABLE}", f"is not a command line ({exc})"
            ) from None
        if not command:
            raise invalid(f"{ROOT}.Environment.{COMMAND_VARIABLE}", "is empty")
        request.command = command


def executor_payload(request: TrainingRequest) -> dict:
    """The job's payload as an executor reads it: `command` and `env`, and what SageMaker would run.

    Hyperparameters reach the command as SageMaker's training toolkit passes them: `SM_HPS` (all of them, as
    JSON) and `SM_HP_<NAME>` for each name that can be a variable; `Environment` wins on a clash.
    """
    env: dict[str, str] = {}
    if request.hyperparameters:
        env["SM_HPS"] = json.dumps(request.hyperparameters, sort_keys=True)
        for name, value in request.hyperparameters.items():
            variable = f"SM_HP_{name.upper()}"
            if _ENV_NAME.match(variable):
                env[variable] = value
    payload: dict = {"env": {**env, **request.env}}
    if request.command is not None:
        payload["command"] = request.command
    sagemaker = {"TrainingImage": request.image, "HyperParameters": request.hyperparameters or None}
    payload["sagemaker"] = {name: value for name, value in sagemaker.items() if value is not None}
    return payload


def no_command_message() -> tuple[str, str]:
    return (
        f"{ROOT}.AlgorithmSpecification.ContainerEntrypoint",
        "an environment with an external executor runs a command: give ContainerEntrypoint (and "
        f"ContainerArguments), or Environment.{COMMAND_VARIABLE}",
    )
