package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"
)

// pyPeer is a libzmq (pyzmq) subscriber and replay client: it subscribes,
// prints the three batches it receives (msgpack-decoded), then asks the
// replay socket for everything from seq 1 and prints the seqs replayed.
const pyPeer = `
import sys, json, zmq, msgpack
pub, rep = sys.argv[1], sys.argv[2]
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB); sub.setsockopt(zmq.SUBSCRIBE, b""); sub.setsockopt(zmq.RCVTIMEO, 10000)
sub.connect(pub)
out = []
for _ in range(3):
    topic, seq, payload = sub.recv_multipart()
    batch = msgpack.unpackb(payload, raw=False)
    out.append({"topic": topic.decode(), "seq": int.from_bytes(seq, "big"), "events": [e["type"] for e in batch[1]], "rank": batch[2],
                "stored": [len(e.get("block_hashes", [])) for e in batch[1] if e["type"] == "BlockStored"]})
d = ctx.socket(zmq.DEALER); d.setsockopt(zmq.RCVTIMEO, 10000); d.connect(rep)
d.send_multipart([b"", (1).to_bytes(8, "big")])
seqs = []
while True:
    fr = d.recv_multipart()
    if fr[2] == b"\xff" * 8:
        break
    seqs.append(int.from_bytes(fr[2], "big"))
print(json.dumps({"batches": out, "replayed": seqs}), flush=True)
`

func TestLibzmqPeer(t *testing.T) {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import zmq, msgpack").Run(); err != nil {
		t.Skipf("libzmq interop needs Debian's python3-zmq and python3-msgpack in %s: %v", py, err)
	}
	e := newTestEngine(t, Config{ID: "e", BlockSize: 4, CapacityBlocks: 3, Topic: "kv@e", DPRank: 1, ReplayEndpoint: "tcp://127.0.0.1:0"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", pyPeer, e.Endpoint(), e.ReplayEndpoint())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for !e.Publisher().Subscribed() {
		if time.Now().After(deadline) {
			t.Fatal("libzmq SUB never subscribed")
		}
		time.Sleep(5 * time.Millisecond) // polling, bounded by the deadline
	}
	if _, err := e.ServeAndPublish(Request{Tokens: seqTokens(0, 8)}); err != nil { // store 2
		t.Fatal(err)
	}
	if _, err := e.ServeAndPublish(Request{Tokens: seqTokens(100, 8)}); err != nil { // evict 1, store 2
		t.Fatal(err)
	}
	if err := e.Reset(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		t.Fatalf("python peer printed nothing: %v", sc.Err())
	}
	var got struct {
		Batches []struct {
			Topic  string
			Seq    uint64
			Events []string
			Rank   int
			Stored []int
		}
		Replayed []uint64
	}
	if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, sc.Bytes())
	}
	want := `{[{kv@e 0 [BlockStored] 1 [2]} {kv@e 1 [BlockRemoved BlockStored] 1 [2]} {kv@e 2 [AllBlocksCleared] 1 []}] [1 2]}`
	if s := fmtStruct(got); s != want {
		t.Fatalf("libzmq peer saw\n%s\nwant\n%s", s, want)
	}
}
