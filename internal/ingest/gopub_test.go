package ingest

import (
	"context"
	"encoding/binary"
	"io"
	"log"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/shamaton/msgpack/v2"
)

// goPub is a go-zeromq PUB socket bound on loopback, for tests that need to
// send what no engine would (garbage) or many publishers at once.
type goPub struct {
	mu   sync.Mutex
	sock zmq4.Socket
	seq  uint64
	port int
}

func newGoPub(t testing.TB) *goPub {
	t.Helper()
	sock := zmq4.NewPub(context.Background(), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	if err := sock.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p := &goPub{sock: sock, port: sock.Addr().(*net.TCPAddr).Port}
	t.Cleanup(func() { sock.Close() })
	return p
}

// send sends raw frames as one message.
func (p *goPub) send(frames ...[]byte) error {
	return p.sock.SendMulti(zmq4.NewMsgFrom(frames...))
}

// publish sends one batch with the next seq and returns the seq.
func (p *goPub) publish(t testing.TB, events []map[string]any) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.seq
	p.seq++
	if err := p.send(nil, seqFrame(seq), encodeBatch(t, events, 0)); err != nil {
		t.Error(err)
	}
	return seq
}

func seqFrame(seq uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	return b[:]
}

// encodeBatch encodes events as vLLM does: [ts, [tagged arrays], dp_rank].
func encodeBatch(t testing.TB, events []map[string]any, rank int) []byte {
	evs := make([]any, 0, len(events))
	for _, e := range events {
		switch e["type"] {
		case "BlockStored":
			evs = append(evs, []any{"BlockStored", e["block_hashes"], e["parent_block_hash"], e["token_ids"],
				e["block_size"], nil, e["medium"]})
		case "BlockRemoved":
			evs = append(evs, []any{"BlockRemoved", e["block_hashes"], e["medium"]})
		default:
			evs = append(evs, []any{e["type"]})
		}
	}
	b, err := msgpack.Marshal([]any{float64(time.Now().UnixNano()) / 1e9, evs, rank})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
