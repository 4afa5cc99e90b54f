"""A real OTLP/HTTP trace receiver on loopback, built on opentelemetry-proto.

    python tests/otlp_receiver.py PORT

POST /v1/traces takes ExportTraceServiceRequest protobuf (gzip or not), as any OTLP
exporter sends it; GET /spans?trace_id=HEX returns the spans received so far as JSON
(ids in hex, attributes and events decoded), so tests read back what a backend got.
"""
from __future__ import annotations

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

SPANS: list[dict] = []
LOCK = threading.Lock()


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _attributes(pairs) -> dict:
    return {kv.key: _value(kv.value) for kv in pairs}


def _decode(request: ExportTraceServiceRequest) -> list[dict]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append({
                    "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(), "name": span.name, "kind": span.kind,
                    "start_ns": span.start_time_unix_nano, "end_ns": span.end_time_unix_nano,
                    "attributes": _attributes(span.attributes), "status_code": span.status.code,
                    "status_message": span.status.message, "scope": scope_spans.scope.name,
                    "resource": resource,
                    "events": [{"name": e.name, "attributes": _attributes(e.attributes)} for e in span.events],
                })
    return spans


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if urlsplit(self.path).path != "/v1/traces":
            return self._reply(404, b"", "text/plain")
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with LOCK:
            SPANS.extend(_decode(request))
        self._reply(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    def do_GET(self):
        parts = urlsplit(self.path)
        if parts.path == "/health":
            return self._reply(200, b"ok", "text/plain")
        trace_id = parse_qs(parts.query).get("trace_id", [""])[0]
        with LOCK:
            spans = [s for s in SPANS if not trace_id or s["trace_id"] == trace_id]
        self._reply(200, json.dumps(spans).encode(), "application/json")

    def _reply(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    print("listening", flush=True)
    server.serve_forever()
