"""Python functions registered in code with @capability and synced into the registry."""
from capabilities.kinds.base import KindEntry
from capabilities.kinds.python import config
from capabilities.kinds.python.executor import PythonExecutor
from runtime.capability import Kind

KIND = KindEntry(
    kind=Kind.PYTHON, registered_in_browser=False,
    config_errors=lambda errors, cfg, policy, server: config.config_errors(errors, cfg, policy),
    make_executor=lambda parts: PythonExecutor(output_store=parts.output_store, redactor=parts.redactor),
)
