"""Three HTTP services instrumented with OpenTelemetry's own Python SDK and instrumentations
(PyPI: opentelemetry-sdk, opentelemetry-instrumentation-wsgi on the servers,
opentelemetry-instrumentation-requests on the clients), making real HTTP calls to each other on
loopback ports, their spans written as the Collector's file exporter writes them: one OTLP/JSON
`TracesData` per line, all processes appending to one file. Used by `tsync-analyze/tests/
spans_sdk.rs`; the venv comes from `cargo xtask setup`.

Usage: otel_services.py SPANS_FILE CALLS
       otel_services.py serve NODE ADDRESSES SPANS_FILE

The second form runs one service (what the first starts three of): ADDRESSES is a JSON object
giving each node's port on loopback or its "HOST:PORT"; the service listens on its own and calls
its peers at theirs, until SIGTERM, which flushes its spans. The namespace lab runs one per
network namespace (`tsync-lab/tests/spans_lab.rs`).

The services, one process each, named by their resource's `host.name`:
  node0 /root  -> node1 /a and node2 /b, one after the other (fan-out)
  node1 /a     -> node2 /c (a chain: node0 -> node1 -> node2)
  node2 /b     -> node0 /d (calls go both ways between node0 and node2)
  node2 /c, node0 /d answer at once.
The driver (this process, not traced) calls node0 /root CALLS times.
"""

import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import time
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

NODES = ("node0", "node1", "node2")
# Every SLOW_EVERY-th root call, node0's first call waits QUEUED_S at node1 before node1's
# span opens. Queued requests are part of any real trace, and they are what an adjuster that
# centres children in their parents gets wrong (a child that fits in its long parent keeps its
# skew), so the comparison with the Jaeger rule does not hang on the machine happening to
# stall during the test.
SLOW_EVERY = 25
QUEUED_S = 0.1

# Which node each path calls, in order.
CALLS = {
    ("node0", "/root"): [("node1", "/a"), ("node2", "/b")],
    ("node1", "/a"): [("node2", "/c")],
    ("node2", "/b"): [("node0", "/d")],
}


def free_ports(n):
    """n loopback ports free now (bound to 0, read, released)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def address(value):
    """(host, port) of a node: a port on loopback, or "HOST:PORT"."""
    if isinstance(value, int):
        return ("127.0.0.1", value)
    host, port = value.rsplit(":", 1)
    return (host, int(port))


class FileExporter:
    """A SpanExporter writing each batch as one OTLP/JSON `TracesData` line, appended to a file
    with one write (O_APPEND), as the Collector's file exporter lays out its output."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @staticmethod
    def _attributes(attrs):
        out = []
        for k, v in (attrs or {}).items():
            if isinstance(v, bool):
                value = {"boolValue": v}
            elif isinstance(v, int):
                value = {"intValue": str(v)}
            elif isinstance(v, float):
                value = {"doubleValue": v}
            else:
                value = {"stringValue": str(v)}
            out.append({"key": k, "value": value})
        return out

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult

        by_resource = {}
        for span in spans:
            by_resource.setdefault(id(span.resource), (span.resource, []))[1].append(span)
        resource_spans = []
        for resource, group in by_resource.values():
            out = []
            for s in group:
                ctx = s.get_span_context()
                out.append({
                    "traceId": format(ctx.trace_id, "032x"),
                    "spanId": format(ctx.span_id, "016x"),
                    "parentSpanId": format(s.parent.span_id, "016x") if s.parent else "",
                    "name": s.name,
                    # The API's SpanKind counts from INTERNAL = 0; OTLP's from UNSPECIFIED = 0.
                    "kind": s.kind.value + 1,
                    "startTimeUnixNano": str(s.start_time),
                    "endTimeUnixNano": str(s.end_time),
                    "attributes": self._attributes(s.attributes),
                    "status": {"code": s.status.status_code.value},
                })
            resource_spans.append({
                "resource": {"attributes": self._attributes(resource.attributes)},
                "scopeSpans": [{"scope": {"name": "tsync-test"}, "spans": out}],
            })
        line = json.dumps({"resourceSpans": resource_spans}, separators=(",", ":")) + "\n"
        os.write(self.fd, line.encode())
        return SpanExportResult.SUCCESS

    def shutdown(self):
        os.close(self.fd)

    def force_flush(self, timeout_millis=30000):
        return True


class ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def serve(node, ports, spans_file):
    """One service: its WSGI app behind OpenTelemetry's WSGI middleware, calling its peers
    through the instrumented `requests`."""
    import requests
    from opentelemetry.instrumentation.requests import RequestsInstrumentor
    from opentelemetry.instrumentation.wsgi import OpenTelemetryMiddleware
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({
        "service.name": f"svc-{node}", "host.name": node,
    }))
    processor = BatchSpanProcessor(FileExporter(spans_file), schedule_delay_millis=200)
    provider.add_span_processor(processor)
    RequestsInstrumentor().instrument(tracer_provider=provider)
    session = requests.Session()

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "/")
        slow = "slow" in environ.get("QUERY_STRING", "")
        for k, (peer, peer_path) in enumerate(CALLS.get((node, path), [])):
            host, port = address(ports[peer])
            query = "?queued=1" if slow and k == 0 else ""
            r = session.get(f"http://{host}:{port}{peer_path}{query}", timeout=10)
            r.raise_for_status()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [f"{node}{path} ok\n".encode()]

    traced = OpenTelemetryMiddleware(app, tracer_provider=provider)

    def queue(environ, start_response):
        # A request that waits before its server's span opens (a full accept queue, a busy
        # worker pool): the client's span grows around a server span that starts late.
        if "queued" in environ.get("QUERY_STRING", ""):
            time.sleep(QUEUED_S)
        return traced(environ, start_response)

    server = make_server(*address(ports[node]), queue,
                         server_class=ThreadingServer, handler_class=QuietHandler)

    def stop(*_):
        provider.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    server.serve_forever()


def wait_ready(port, deadline):
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"service on port {port} did not start")
            time.sleep(0.05)


def drive(spans_file, calls):
    import requests

    if os.path.exists(spans_file):
        os.remove(spans_file)
    ports = dict(zip(NODES, free_ports(len(NODES))))
    procs = [subprocess.Popen([sys.executable, __file__, "serve", node, json.dumps(ports), spans_file])
             for node in NODES]
    try:
        deadline = time.monotonic() + 60
        for node in NODES:
            wait_ready(ports[node], deadline)
        session = requests.Session()
        for i in range(calls):
            query = "?slow=1" if i % SLOW_EVERY == SLOW_EVERY - 1 else ""
            r = session.get(f"http://127.0.0.1:{ports['node0']}/root{query}", timeout=10)
            r.raise_for_status()
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=30)
    failed = [p.returncode for p in procs if p.returncode != 0]
    if failed:
        raise SystemExit(f"services exited with {failed}")


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], json.loads(sys.argv[3]), sys.argv[4])
    else:
        drive(sys.argv[1], int(sys.argv[2]))
