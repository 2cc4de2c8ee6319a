"""Fleet and plan models, and YAML loading with located errors."""

from orchestrator.config.base import MAX_NAME, MAX_SEED, MIN_SEED
from orchestrator.config.fleet import Fleet, HostDeviceConfig, IphoneDeviceConfig, LocalHost, SshHost
from orchestrator.config.loader import ConfigError, Problem, load_any, load_fleet, load_plan
from orchestrator.config.plan import Arm, DecisionRule, Plan, RetryPolicy, SequentialLooks, SettlePolicy
from orchestrator.config.sim import RuntimeTruth, SimDeviceConfig

__all__ = [
    "MAX_NAME",
    "MAX_SEED",
    "MIN_SEED",
    "Arm",
    "ConfigError",
    "DecisionRule",
    "Fleet",
    "HostDeviceConfig",
    "IphoneDeviceConfig",
    "LocalHost",
    "Plan",
    "Problem",
    "RetryPolicy",
    "RuntimeTruth",
    "SequentialLooks",
    "SettlePolicy",
    "SimDeviceConfig",
    "SshHost",
    "load_any",
    "load_fleet",
    "load_plan",
]
