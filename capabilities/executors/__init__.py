"""Capability executors: one module per kind (python, http, mcp) behind BaseExecutor."""
from .base import BaseExecutor, CapabilityError, FileOutputStore, OutputStore
from .dispatch import CapabilityExecutor, Executor
from .netguard import NetGuard, URLRefused, validate_url

__all__ = ["BaseExecutor", "CapabilityError", "CapabilityExecutor", "Executor", "FileOutputStore", "NetGuard",
           "OutputStore", "URLRefused", "validate_url"]
