"""HTTP webhooks registered in the browser or the API, called through the egress guard."""
from capabilities.kinds.base import KindEntry
from capabilities.kinds.http import config, form
from capabilities.kinds.http.executor import HttpExecutor
from runtime.capability import Kind

KIND = KindEntry(
    kind=Kind.HTTP, registered_in_browser=True,
    config_errors=lambda errors, cfg, policy, server: config.config_errors(errors, cfg, policy),
    make_executor=lambda parts: HttpExecutor(guard=parts.guard, output_store=parts.output_store,
                                             redactor=parts.redactor),
    legend="HTTP endpoint", form_fields=form.form_fields, initial=form.initial, config_from=form.config_from,
    normalized=config.normalized,
)
