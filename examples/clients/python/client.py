"""floe.v1 from Python: every kind of ID, a stream, and sequences WEAK and STRONG.

Usage: python client.py [ADDRESS]   (default: $FLOE_GRPC, else 127.0.0.1:34904)

The floe/v1/floe_pb2*.py modules are generated from floe's proto (run.sh does it):
    python -m grpc_tools.protoc -I crates/floe-server/proto \
        --python_out=GEN --grpc_python_out=GEN floe/v1/floe.proto

Prints one line per ID: `NextIds KIND VALUE TEXT` and `StreamIds KIND VALUE TEXT` (VALUE:
a Snowflake ID's number, any other kind's bytes in hex; TEXT: the ID's text, answered by the
server), then `NextSequence WEAK|STRONG ID` and `StreamSequence STRONG ID`.
"""

import os
import sys

import grpc

from floe.v1 import floe_pb2, floe_pb2_grpc

KINDS = {
    "snowflake": floe_pb2.KIND_SNOWFLAKE,
    "sno": floe_pb2.KIND_SNO,
    "lexical": floe_pb2.KIND_LEXICAL,
    "uuid7": floe_pb2.KIND_UUID7,
    "ulid": floe_pb2.KIND_ULID,
}


def print_ids(method, kind, response):
    # Snowflake IDs come as numbers (uint64: a Python int, exact), the others as bytes.
    values = response.numbers if kind == "snowflake" else [b.hex() for b in response.binary]
    for value, text in zip(values, response.text, strict=True):
        print(method, kind, value, text)


def main():
    default = os.environ.get("FLOE_GRPC", "127.0.0.1:34904")
    address = sys.argv[1] if len(sys.argv) > 1 else default
    with grpc.insecure_channel(address) as channel:
        floe = floe_pb2_grpc.FloeStub(channel)

        for name, kind in KINDS.items():
            request = floe_pb2.NextIdsRequest(kind=kind, count=3, with_text=True)
            print_ids("NextIds", name, floe.NextIds(request, timeout=10))

        # A bulk export: 1,000 Snowflake IDs in messages of 250.
        request = floe_pb2.StreamIdsRequest(
            kind=floe_pb2.KIND_SNOWFLAKE, total=1000, batch=250, with_text=True
        )
        for message in floe.StreamIds(request, timeout=30):
            print_ids("StreamIds", "snowflake", message)

        # Sequences on the server's only store ("" picks it): WEAK IDs increase for this
        # server; a STRONG batch is a run of consecutive IDs.
        for mode, key in [("WEAK", "orders"), ("STRONG", "invoices")]:
            increment = floe_pb2.Increment.Value("INCREMENT_" + mode)
            for _ in range(2):
                request = floe_pb2.NextSequenceRequest(key=key, increment=increment, count=5)
                for id_ in floe.NextSequence(request, timeout=10).ids:
                    print("NextSequence", mode, id_)

        request = floe_pb2.StreamSequenceRequest(
            key="invoices", increment=floe_pb2.INCREMENT_STRONG, total=20, batch=8
        )
        for message in floe.StreamSequence(request, timeout=30):
            for id_ in message.ids:
                print("StreamSequence STRONG", id_)


if __name__ == "__main__":
    try:
        main()
    except grpc.RpcError as e:
        sys.exit(f"floe: {e.code().name}: {e.details()}")
