package ingest

import (
	"encoding/binary"
	"net"
	"strconv"
	"testing"

	"github.com/go-zeromq/zmq4"

	"github.com/kvrouter/kvrouter/internal/radix"
)

// rawPub is a publisher that speaks ZMTP by hand, so it can send frames no
// library would: it accepts the router's connections one at a time and hands
// each (after the handshake and the subscription) to the next func of script.
func rawPub(t *testing.T, script ...func(nc net.Conn, c *zmq4.Conn)) int {
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
			c, err := openZMTP(nc, zmq4.Pub, true)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := c.RecvMsg(); err != nil { // the subscription
				t.Error(err)
				return
			}
			step(nc, c)
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

// TestOversizedMessage: a publisher that announces a frame larger than the
// router accepts, or floods one multipart message with frames, must cost the
// router neither a crash (zmq4 allocates whatever a frame header claims) nor
// unbounded memory: the connection is dropped, counted, and the subscription
// comes back and keeps working.
func TestOversizedMessage(t *testing.T) {
	defer func(v int64) { maxMessageBytes = v }(maxMessageBytes)
	maxMessageBytes = 1 << 20

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
			nc.Write(longFrame(0, uint64(maxMessageBytes)+1))
		}},
		{"multipart flood", func(nc net.Conn) {
			frame := append([]byte{0x1, 255}, make([]byte, 255)...) // MORE, 255 bytes
			for i := 0; i < 2*int(maxMessageBytes)/255; i++ {
				if _, err := nc.Write(frame); err != nil {
					return // the router hung up: what we want
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, idx, _ := newTestManager(t, true)
			e := newEngine(1)
			port := rawPub(t,
				func(nc net.Conn, c *zmq4.Conn) { tc.send(nc) },
				func(nc net.Conn, c *zmq4.Conn) {
					for seq := uint64(0); seq < 3; seq++ {
						_, ev := e.store(nil, 4)
						p := encodeBatch(t, []map[string]any{ev}, 0)
						if err := c.SendMsg(zmq4.NewMsgFrom(nil, seqFrame(seq), p)); err != nil {
							t.Error(err)
						}
					}
				})
			if err := m.Add(Worker{ID: "w", KVEndpoint: ">tcp://127.0.0.1:" + strconv.Itoa(port)}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the batches sent after the reconnect", func() bool {
				return status(t, m, "w").LastSeq == 2
			})
			checkTruth(t, idx, radix.Worker{ID: "w"}, e)
			st := status(t, m, "w")
			if st.Reconnects == 0 || st.DecodeErrors == 0 {
				t.Errorf("status %+v: want the oversized message counted and the connection redialled", st)
			}
		})
	}
}
