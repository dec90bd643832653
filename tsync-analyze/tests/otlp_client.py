"""Reads `tsync-analyze apply --format otlp` output with the OpenTelemetry project's own
protobuf definitions (PyPI's opentelemetry-proto) and checks the times against what the Rust test
expects. Usage: otlp_client.py OUTPUT.jsonl EXPECTED.json

Every line must parse strictly (no unknown field) into
opentelemetry.proto.trace.v1.trace_pb2.TracesData with google.protobuf.json_format. OTLP/JSON
writes trace and span ids in hex where protobuf's JSON mapping has base64, so the ids are turned
into base64 first, as the OTLP specification's receivers do.
"""

import base64
import json
import sys

from google.protobuf import json_format
from opentelemetry.proto.trace.v1 import trace_pb2

ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def hex_ids_to_base64(node):
    """OTLP/JSON's hex ids as the base64 protobuf's JSON mapping reads, everywhere."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            else:
                hex_ids_to_base64(value)
    elif isinstance(node, list):
        for value in node:
            hex_ids_to_base64(value)


def attributes(kvs):
    out = {}
    for kv in kvs:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which)
    return out


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def main():
    output, expected_path = sys.argv[1], sys.argv[2]
    with open(expected_path) as f:
        expected = json.load(f)
    spans = events = 0
    with open(output) as f:
        for number, line in enumerate(f, 1):
            doc = json.loads(line)
            hex_ids_to_base64(doc)
            data = trace_pb2.TracesData()
            try:
                json_format.ParseDict(doc, data, ignore_unknown_fields=False)
            except json_format.ParseError as e:
                fail(f"{output}:{number}: not a TracesData: {e}")
            for rs in data.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        span_id = span.span_id.hex()
                        want = expected.get(span_id)
                        if want is None:
                            fail(f"{output}:{number}: span {span_id} was not written")
                        if span.start_time_unix_nano != want["start"]:
                            fail(f"{span_id}: start {span.start_time_unix_nano} != {want['start']}")
                        if span.end_time_unix_nano != want["end"]:
                            fail(f"{span_id}: end {span.end_time_unix_nano} != {want['end']}")
                        got = [e.time_unix_nano for e in span.events]
                        if got != want["events"]:
                            fail(f"{span_id}: events {got} != {want['events']}")
                        a = attributes(span.attributes)
                        if a.get("tsync.local.start_time_unix_nano") != want["local_start"]:
                            fail(f"{span_id}: tsync.local.start_time_unix_nano is "
                                 f"{a.get('tsync.local.start_time_unix_nano')!r}")
                        if not a.get("tsync.node", "").startswith("node"):
                            fail(f"{span_id}: tsync.node is {a.get('tsync.node')!r}")
                        lo, hi = a.get("tsync.start.lo_unix_nano"), a.get("tsync.start.hi_unix_nano")
                        if lo is not None and not lo <= span.start_time_unix_nano <= hi:
                            fail(f"{span_id}: start outside its own interval [{lo}, {hi}]")
                        for e in span.events:
                            ea = attributes(e.attributes)
                            if "tsync.local.time_unix_nano" not in ea:
                                fail(f"{span_id}: an event without tsync.local.time_unix_nano")
                            events += 1
                        spans += 1
    print(f"read {spans} spans and {events} span events with opentelemetry-proto "
          f"(TracesData): every time as expected")


if __name__ == "__main__":
    main()
