#!/usr/bin/env python3
"""A minimal API gateway in front of kvrouter, in Python.

Routes one completion request through kvrouter, sends it to the chosen
engine and data-parallel rank, marks its prefill done at the first streamed
token and its end when the stream ends, fails or is cancelled: the request
lifecycle of docs/gateway.md. Prints the result as one JSON line.

    python3 examples/python/gateway.py --router localhost:50051 \
        --model my-model --tokens 1,2,3 --fallback 10.0.0.5:8000

Needs grpcio and protobuf (Debian: python3-grpcio, python3-protobuf) and the
stubs of api/proto/kvrouter/v1/router.proto: pass --stubs DIR holding
kvrouter/v1/router_pb2*.py, or have protoc and grpc_python_plugin on PATH
(Debian: protobuf-compiler, protobuf-compiler-grpc) and they are generated
into a temporary directory at start.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc

PROTO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "api", "proto")
MARK_TIMEOUT = 2.0


def load_stubs(stubs_dir):
    """Imports router_pb2 and router_pb2_grpc, generating them if needed."""
    if stubs_dir is None:
        stubs_dir = tempfile.mkdtemp(prefix="kvrouter-stubs-")
        plugin = shutil.which("grpc_python_plugin")
        if plugin is None or shutil.which("protoc") is None:
            sys.exit("gateway: need --stubs, or protoc and grpc_python_plugin on PATH")
        subprocess.run(
            ["protoc", "-I", PROTO_ROOT, "--python_out=" + stubs_dir, "--grpc_out=" + stubs_dir,
             "--plugin=protoc-gen-grpc=" + plugin, "kvrouter/v1/router.proto"],
            check=True)
    sys.path.insert(0, stubs_dir)
    from kvrouter.v1 import router_pb2, router_pb2_grpc  # noqa: E402
    return router_pb2, router_pb2_grpc


class Busy(Exception):
    """Every engine is busy: queue the request or shed it (HTTP 429)."""


class Gateway:
    def __init__(self, pb, pb_grpc, routers, fallback, route_timeout=0.05):
        self.pb = pb
        self.routers = [pb_grpc.RouterStub(grpc.insecure_channel(a)) for a in routers]
        self.fallback = fallback
        self.route_timeout = route_timeout

    def route(self, request_id, prompt):
        """Asks each replica in turn; returns (response, stub) or (None, None) to fall back."""
        req = self.pb.RouteRequest(prompt=prompt, request_id=request_id, max_candidates=1)
        for stub in self.routers:
            try:
                return stub.Route(req, timeout=self.route_timeout), stub
            except grpc.RpcError as e:
                code = e.code()
                if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise Busy(e.details()) from e
                if code == grpc.StatusCode.UNAVAILABLE:
                    continue  # not serving, draining or unreachable: the next replica
                return None, None  # InvalidArgument, NotFound, DeadlineExceeded: fall back
        return None, None

    def serve(self, request_id, prompt, body):
        rr, stub = self.route(request_id, prompt)
        if rr is None:
            return self.dispatch(self.fallback(), None, body, None)
        ref = self.pb.RequestRef(request_id=request_id)
        marks = []
        try:
            return self.dispatch(rr.endpoint, rr.dp_rank, body,
                                 lambda: marks.append(self.mark(stub.MarkPrefillDone, ref)))
        finally:
            # On success, error and cancellation alike: an unfinished request
            # holds its load until the router's --request-ttl.
            for t in marks:
                t.join()
            self.call_mark(stub.MarkFinished, ref)

    def mark(self, rpc, ref):
        t = threading.Thread(target=self.call_mark, args=(rpc, ref), daemon=True)
        t.start()
        return t

    @staticmethod
    def call_mark(rpc, ref):
        try:
            rpc(ref, timeout=MARK_TIMEOUT)
        except grpc.RpcError:
            pass  # NotFound: expired, or routed on a replica that failed

    @staticmethod
    def dispatch(endpoint, dp_rank, body, on_first_token):
        headers = {"Content-Type": "application/json"}
        if dp_rank is not None:
            headers["X-Data-Parallel-Rank"] = str(dp_rank)
        req = urllib.request.Request("http://" + endpoint + "/v1/completions",
                                     data=body, headers=headers, method="POST")
        chunks = 0
        with urllib.request.urlopen(req, timeout=60) as resp:
            for raw in resp:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    return {"endpoint": endpoint, "dp_rank": dp_rank,
                            "routed": dp_rank is not None, "chunks": chunks}
                if chunks == 0 and on_first_token is not None:
                    on_first_token()
                chunks += 1
        raise RuntimeError("engine %s: stream ended without [DONE]" % endpoint)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--router", default="localhost:50051", help="kvrouter replicas, comma-separated")
    ap.add_argument("--model", default="bench-model")
    ap.add_argument("--tokens", required=True,
                    help="prompt token ids, comma-separated (the engine's tokenizer, after the chat template)")
    ap.add_argument("--request-id", default="py-%d" % time.time_ns())
    ap.add_argument("--fallback", default="", help="engine endpoint when kvrouter cannot route")
    ap.add_argument("--stubs", default=None, help="directory holding kvrouter/v1/router_pb2*.py")
    args = ap.parse_args()

    pb, pb_grpc = load_stubs(args.stubs)
    ids = [int(t) for t in args.tokens.split(",")]
    gw = Gateway(pb, pb_grpc, args.router.split(","), lambda: args.fallback)
    body = json.dumps({"model": args.model, "prompt": ids, "max_tokens": 16, "stream": True}).encode()
    try:
        res = gw.serve(args.request_id, pb.Prompt(model=args.model, token_ids=ids), body)
    except Busy as e:
        print("gateway: busy:", e, file=sys.stderr)
        return 2
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
