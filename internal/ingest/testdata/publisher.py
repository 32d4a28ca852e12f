#!/usr/bin/python3
"""A test KV event publisher built on libzmq (pyzmq) that behaves like vLLM's.

PUB socket sending (topic, 8-byte big-endian seq, msgpack payload), an
optional ROUTER replay socket answering ["", start_seq] with every buffered
batch whose seq >= start_seq and then an end marker with seq -1, the batch as
[ts, events, dp_rank] (or a map), events as tagged arrays or tagged maps.

The test drives it with JSON commands on stdin, one per line; every command is
answered with one JSON line on stdout:

  {"op": "publish", "events": [...], "skip": false, "form": "array"|"map"}
      Encode one batch and give it the next seq. With skip, the batch goes to
      the replay buffer but not to the live socket (a dropped message).
      "payload_hex" replaces the encoded batch (live and buffered),
      "live_payload_hex" the live copy only. Reply: {"seq": n}.
  {"op": "raw", "frames": ["hex", ...]}
      Send these frames on the PUB socket as one message. Reply: {}.
  {"op": "requests"}
      The start seqs of the replay requests received so far, in order.
      Reply: {"starts": [...]}.
  {"op": "exit"}
      Close the sockets and exit. Reply: {}.

Events use vLLM's field names: {"type": "BlockStored", "block_hashes": [...],
"parent_block_hash": h|null, "token_ids": [...], "block_size": 16,
"medium": "GPU"}, {"type": "BlockRemoved", "block_hashes": [...]},
{"type": "AllBlocksCleared"}.

At start it prints {"pub_port": p, "replay_port": q} (0 when unused).
"""

import argparse
import json
import sys
import time
from collections import deque

try:
    import msgpack
    import zmq
except ImportError as exc:  # reported to the Go test verbatim
    print(json.dumps({"error": "import: %s" % exc}), flush=True)
    sys.exit(3)

END_SEQ = (-1).to_bytes(8, "big", signed=True)

STORED_FIELDS = ["block_hashes", "parent_block_hash", "token_ids", "block_size",
                 "lora_id", "medium", "lora_name"]
REMOVED_FIELDS = ["block_hashes", "medium"]


def encode_event(ev, form):
    tag = ev["type"]
    if form == "map":
        out = {"type": tag}
        for k, v in ev.items():
            if k != "type":
                out[k] = v
        return out
    if tag == "BlockStored":
        fields = STORED_FIELDS
    elif tag == "BlockRemoved":
        fields = REMOVED_FIELDS
    else:
        fields = []
    return [tag] + [ev.get(f) for f in fields]


def encode_batch(events, form, rank):
    evs = [encode_event(e, form) for e in events]
    ts = time.time()
    if form == "map":
        return msgpack.packb({"ts": ts, "events": evs, "data_parallel_rank": rank})
    return msgpack.packb([ts, evs, rank])


def bind_or_connect(sock, endpoint):
    """Bind like the engines do (wildcard / ipc / inproc), else connect.
    Returns the bound TCP port, or 0."""
    if "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://")):
        if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
            return sock.bind_to_random_port(endpoint[: endpoint.rfind(":")])
        sock.bind(endpoint)
        if endpoint.startswith("tcp://"):
            return int(endpoint.rsplit(":", 1)[1])
        return 0
    sock.connect(endpoint)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pub", required=True)
    ap.add_argument("--replay", default="")
    ap.add_argument("--topic-hex", default="", help="topic bytes, hex encoded")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--buffer", type=int, default=10000)
    ap.add_argument("--form", default="array")
    ap.add_argument("--replay-topic", action="store_true",
                    help="reply with 4 frames ['', topic, seq, payload] (vLLM >= 0.26)")
    args = ap.parse_args()

    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    pub.set_hwm(100000)
    pub.setsockopt(zmq.LINGER, 0)
    pub_port = bind_or_connect(pub, args.pub)
    replay = None
    replay_port = 0
    if args.replay:
        replay = ctx.socket(zmq.ROUTER)
        replay.setsockopt(zmq.LINGER, 0)
        replay_port = bind_or_connect(replay, args.replay)

    topic = bytes.fromhex(args.topic_hex)
    buf = deque(maxlen=args.buffer)
    seq = 0
    starts = []

    print(json.dumps({"pub_port": pub_port, "replay_port": replay_port}), flush=True)

    poller = zmq.Poller()
    stdin = sys.stdin.buffer
    poller.register(stdin.fileno(), zmq.POLLIN)
    if replay is not None:
        poller.register(replay, zmq.POLLIN)

    def reply(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    while True:
        ready = dict(poller.poll())
        if replay is not None and ready.get(replay):
            while True:
                try:
                    frames = replay.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if len(frames) != 3:
                    continue
                client, _, start = frames
                start_seq = int.from_bytes(start, "big")
                starts.append(start_seq)
                for s, payload in list(buf):
                    if s >= start_seq:
                        sb = s.to_bytes(8, "big")
                        if args.replay_topic:
                            replay.send_multipart((client, b"", topic, sb, payload))
                        else:
                            replay.send_multipart((client, b"", sb, payload))
                if args.replay_topic:
                    replay.send_multipart((client, b"", topic, END_SEQ, b""))
                else:
                    replay.send_multipart((client, b"", END_SEQ, b""))
        if ready.get(stdin.fileno()):
            line = stdin.readline()
            if not line:
                break
            cmd = json.loads(line)
            op = cmd.get("op")
            if op == "publish":
                payload = encode_batch(cmd.get("events", []), cmd.get("form", args.form), args.rank)
                if "payload_hex" in cmd:
                    payload = bytes.fromhex(cmd["payload_hex"])
                live = payload
                if "live_payload_hex" in cmd:
                    live = bytes.fromhex(cmd["live_payload_hex"])
                s = seq
                seq += 1
                if not cmd.get("skip"):
                    pub.send_multipart((topic, s.to_bytes(8, "big"), live))
                buf.append((s, payload))
                reply({"seq": s})
            elif op == "raw":
                pub.send_multipart([bytes.fromhex(f) for f in cmd["frames"]])
                reply({})
            elif op == "requests":
                reply({"starts": starts})
            elif op == "exit":
                reply({})
                break
            else:
                reply({"error": "unknown op %r" % op})

    pub.close(0)
    if replay is not None:
        replay.close(0)
    ctx.term()


if __name__ == "__main__":
    main()
