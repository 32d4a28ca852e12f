package ingest

import (
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/go-zeromq/zmq4"
	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// rawPub is a publisher that speaks ZMTP by hand, so it can send frames no
// library would: it accepts the router's connections one at a time and hands
// each to the next func of script (pubHandshake does a PUB's handshake).
func rawPub(t *testing.T, script ...func(nc net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, nc := range held {
				nc.Close()
			}
		}()
		for _, step := range script {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, nc)
			step(nc)
		}
		// Keep the last connection open; wait for the test to end.
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, nc)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// pubHandshake performs a PUB's handshake on nc and reads the subscription.
func pubHandshake(t *testing.T, nc net.Conn) *zmtpConn {
	c, err := openZMTP(nc, zmq4.Pub, true)
	if err != nil {
		t.Error(err)
		return nil
	}
	if _, _, _, err := c.recv(); err != nil { // the subscription
		t.Error(err)
		return nil
	}
	return c
}

// publishStores sends three batches of 4 stored blocks each, seqs 0..2.
func publishStores(t *testing.T, e *engine, nc net.Conn) {
	c := pubHandshake(t, nc)
	if c == nil {
		return
	}
	for seq := uint64(0); seq < 3; seq++ {
		_, ev := e.store(nil, 4)
		p := encodeBatch(t, []map[string]any{ev}, 0)
		if err := c.send(nil, seqFrame(seq), p); err != nil {
			t.Error(err)
		}
	}
}

// zmtpGreeting is a ZMTP 3.0 greeting with the NULL mechanism, as a server.
func zmtpGreeting() []byte {
	g := make([]byte, zmtpGreetingLen)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 0
	copy(g[12:], "NULL")
	g[32] = 1
	return g
}

// TestBadHandshake: a peer whose READY metadata is malformed must fail the
// handshake (zmq4's metadata parser indexes past the end of such a body and
// panics), and the subscription comes back when the peer behaves.
func TestBadHandshake(t *testing.T) {
	for _, tc := range []struct {
		name string
		meta []byte
	}{
		{"key runs past the end", []byte{5, 'a'}},
		{"key fills the body", []byte{1, 'a'}},
		{"no room for the value length", []byte{1, 'a', 0, 0}},
		{"value runs past the end", []byte{1, 'a', 0, 0, 0, 9, 'x'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, idx, _ := newTestManager(t, true)
			e := newEngine(1)
			port := rawPub(t,
				func(nc net.Conn) {
					body := append([]byte{5}, "READY"...)
					body = append(body, tc.meta...)
					frame := append([]byte{0x4, byte(len(body))}, body...)
					nc.Write(append(zmtpGreeting(), frame...))
					nc.Read(make([]byte, 512)) // until the router hangs up
				},
				func(nc net.Conn) { publishStores(t, e, nc) })
			if err := m.Add(Worker{ID: "w", KVEndpoint: ">tcp://127.0.0.1:" + strconv.Itoa(port)}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the batches sent after the reconnect", func() bool {
				return status(t, m, "w").LastSeq == 2
			})
			checkTruth(t, idx, kv.WorkerRank{ID: "w"}, e)
		})
	}
}

// TestOversizedMessage: a publisher that announces a frame larger than the
// router accepts, or floods one multipart message with frames, must cost the
// router neither a crash (zmq4 allocates whatever a frame header claims) nor
// unbounded memory: the connection is dropped, counted, and the subscription
// comes back and keeps working.
func TestOversizedMessage(t *testing.T) {
	const maxMessageBytes = 1 << 20

	longFrame := func(flags byte, size uint64) []byte {
		return binary.BigEndian.AppendUint64([]byte{flags | 0x2}, size)
	}
	for _, tc := range []struct {
		name string
		send func(nc net.Conn)
	}{
		{"frame claims 2^50 bytes", func(nc net.Conn) {
			nc.Write(longFrame(0, 1<<50))
		}},
		{"frame just over the limit", func(nc net.Conn) {
			nc.Write(longFrame(0, maxMessageBytes+1))
		}},
		{"multipart flood", func(nc net.Conn) {
			frame := append([]byte{0x1, 255}, make([]byte, 255)...) // MORE, 255 bytes
			for i := 0; i < 2*maxMessageBytes/255; i++ {
				if _, err := nc.Write(frame); err != nil {
					return // the router hung up: what we want
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx := radix.New(radix.Config{CheckInvariants: true})
			m, _ := newTestManagerWith(t, idx, func(c *Config) { c.MaxMessageBytes = maxMessageBytes })
			e := newEngine(1)
			port := rawPub(t,
				func(nc net.Conn) {
					if pubHandshake(t, nc) != nil {
						tc.send(nc)
					}
				},
				func(nc net.Conn) { publishStores(t, e, nc) })
			if err := m.Add(Worker{ID: "w", KVEndpoint: ">tcp://127.0.0.1:" + strconv.Itoa(port)}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the batches sent after the reconnect", func() bool {
				return status(t, m, "w").LastSeq == 2
			})
			checkTruth(t, idx, kv.WorkerRank{ID: "w"}, e)
			st := status(t, m, "w")
			if st.Reconnects == 0 || st.DecodeErrors == 0 {
				t.Errorf("status %+v: want the oversized message counted and the connection redialled", st)
			}
		})
	}
}

// FuzzMetadata: whatever checkMetadata accepts, zmq4's metadata parser reads
// without panicking.
func FuzzMetadata(f *testing.F) {
	f.Add([]byte{})
	f.Add(append(append([]byte{11}, "Socket-Type"...), 0, 0, 0, 3, 'P', 'U', 'B'))
	f.Add([]byte{1, 'a'})
	f.Add([]byte{1, 'a', 0, 0, 0, 9, 'x'})
	f.Fuzz(func(t *testing.T, p []byte) {
		if checkMetadata(p) != nil {
			return
		}
		md := zmq4.Metadata{}
		if err := md.UnmarshalZMTP(p); err != nil {
			t.Fatalf("checkMetadata accepted %x, zmq4 says %v", p, err)
		}
	})
}

// TestLargeMessagesBounded: the queue bounds messages by count, and one
// message may be as large as maxMessageBytes, so a publisher flooding large
// messages at a slow index could queue QueueDepth x maxMessageBytes. At most
// largeSlots messages of largeMessage bytes or more are queued at once: the
// reader waits for the applier (back-pressure) before queuing another.
func TestLargeMessagesBounded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &rank{ctx: ctx, q: make(chan item, 256), large: make(chan struct{}, largeSlots)}
	var pushed atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 3*largeSlots; i++ {
			big := item{seq: uint64(i), payload: make([]byte, largeMessage)}
			if !r.push(big) {
				return
			}
			pushed.Add(1)
			// Small messages are not held back by large ones in the queue.
			if !r.push(item{seq: uint64(i), payload: []byte{1}}) {
				return
			}
		}
	}()
	eventually(t, "the large message slots to fill", func() bool { return pushed.Load() >= largeSlots })
	if got := pushed.Load(); got != largeSlots {
		t.Fatalf("%d large messages queued, want at most %d", got, largeSlots)
	}
	// The applier takes one large message: one more may be queued.
	for it := <-r.q; ; it = <-r.q {
		if r.dequeued(it); len(it.payload) >= largeMessage {
			break
		}
	}
	eventually(t, "a freed slot to be used", func() bool { return pushed.Load() == largeSlots+1 })
	cancel()
	<-done
}
