"""Tools of MCP servers (stdio or streamable HTTP), registered in the browser or the API."""
from capabilities.kinds.base import KindEntry
from capabilities.kinds.mcp import config, form
from capabilities.kinds.mcp.executor import McpExecutor
from runtime.capability import Kind

KIND = KindEntry(
    kind=Kind.MCP, registered_in_browser=True,
    config_errors=config.config_errors,
    make_executor=lambda parts: McpExecutor(guard=parts.guard, stdio=parts.stdio, output_store=parts.output_store,
                                            redactor=parts.redactor),
    legend="MCP tool", form_fields=form.form_fields, initial=form.initial, config_from=form.config_from,
    names_a_server=True,
    first_call_note="the first call of an MCP server starts it, which can take a few seconds.",
)
