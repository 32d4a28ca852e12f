package ingest

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// The ZMQ edge's limits (issue 20): memory follows what a peer sent, not
// what it claims; one publisher per bound rank; handshakes and messages
// make progress in time; a shared queue budget; rate-limited catch-ups; a
// batch that does not decode is a gap. Allocation is measured with
// runtime.MemStats, never inferred from timing.

// allocated returns the bytes the process allocated while fn ran.
func allocated(fn func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	fn()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// emptyEventsBatch is [1.0, [[], [], ...], 0] with n empty events (one byte
// each on the wire).
func emptyEventsBatch(n int) []byte {
	p := []byte{0x93, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0xdd}
	p = binary.BigEndian.AppendUint32(p, uint32(n))
	for range n {
		p = append(p, 0x90)
	}
	return append(p, 0)
}

// TestEmptyEventsBatch: one 4 MiB batch of 4 million empty events used to
// take the router from 17 MiB to 1.8 GiB. Now its events array is refused
// at its header (Config.MaxBatchEvents), the batch is a gap (no replay
// endpoint here: the rank is cleared and rebuilt) and the router allocates
// little more than the message itself.
func TestEmptyEventsBatch(t *testing.T) {
	idx := radix.New(radix.Config{CheckInvariants: true})
	m, _ := newTestManagerWith(t, idx, func(*Config) {})
	e := newEngine(7)
	huge := appendZMTPMessage(nil, 0, emptyEventsBatch(4<<20))
	var batches [][]byte
	for range 3 {
		_, ev := e.store(nil, 4)
		batches = append(batches, encodeBatch(t, []map[string]any{ev}, 0))
	}
	port := rawPub(t, func(nc net.Conn) {
		c := pubHandshake(t, nc)
		if c == nil {
			return
		}
		if _, err := nc.Write(huge); err != nil {
			t.Error(err)
			return
		}
		for i, p := range batches {
			if err := c.send(nil, seqFrame(uint64(i+1)), p); err != nil {
				t.Error(err)
			}
		}
	})
	a := allocated(func() {
		if err := m.Add(Worker{ID: "w", KVEndpoint: fmt.Sprintf(">tcp://127.0.0.1:%d", port)}); err != nil {
			t.Fatal(err)
		}
		waitSeq(t, m, "w", 3)
	})
	t.Logf("a %d-byte batch of %d empty events: %.1f MiB allocated", len(huge), 4<<20, float64(a)/(1<<20))
	if a > 32<<20 {
		t.Errorf("%d MiB allocated for a 4 MiB message", a>>20)
	}
	checkTruth(t, idx, kv.WorkerRank{ID: "w"}, e)
	st := status(t, m, "w")
	if st.DecodeErrors != 1 || st.Gaps != 1 || st.ReplayFailures != 1 {
		t.Errorf("status %+v: want the batch counted as undecodable, a gap and history lost", st)
	}
}

// pubReady is a PUB's greeting and READY command, as a raw peer sends them.
func pubReady() []byte {
	meta := append([]byte{11}, "Socket-Type"...)
	meta = append(meta, 0, 0, 0, 3)
	meta = append(meta, "PUB"...)
	body := append(append([]byte{5}, "READY"...), meta...)
	g := zmtpGreeting()
	g[32] = 0 // as client
	return append(append(g, 0x4, byte(len(body))), body...)
}

// longHeader is the header of a last frame of size bytes.
func longHeader(size uint64) []byte { return binary.BigEndian.AppendUint64([]byte{0x2}, size) }

// dropped reads connections_dropped_total of worker id by reason.
func dropped(t *testing.T, reg *prometheus.Registry, id string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kvrouter_ingest_connections_dropped_total" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			var worker, reason string
			for _, l := range mm.GetLabel() {
				switch l.GetName() {
				case "worker":
					worker = l.GetValue()
				case "reason":
					reason = l.GetValue()
				}
			}
			if worker == id {
				out[reason] = mm.GetCounter().GetValue()
			}
		}
	}
	return out
}

// dialPub is a go-zeromq PUB that connects to a router-bound rank.
func dialPub(t *testing.T, port int) *goPub {
	t.Helper()
	sock := zmq4.NewPub(context.Background(), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	if err := sock.Dial(fmt.Sprintf("tcp://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close() })
	return &goPub{sock: sock}
}

// TestSilentPeers: 30 connections to a router-bound rank, each a ZMTP
// greeting, READY and a frame header claiming 60 MiB, then silence, used to
// hold 1.4 GiB for as long as the peers stayed silent. Now one of them is
// the rank's publisher and the others are refused; its frame's buffer
// holds what arrived (nothing), and its silence mid-frame drops it after
// FrameTimeout. An honest engine then connects and is followed.
func TestSilentPeers(t *testing.T) {
	idx := radix.New(radix.Config{CheckInvariants: true})
	// FrameTimeout is longer than dialling the 30 can take on a loaded
	// machine: a first attacker dropped before the last dial would let that
	// one be the publisher, a second stall.
	m, reg := newTestManagerWith(t, idx, func(c *Config) {
		c.FrameTimeout = time.Second
		c.MaxMessageBytes = 64 << 20 // the limit the attack was made against
	})
	port := freePort(t)
	attack := append(pubReady(), longHeader(60<<20)...)
	var conns []net.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	a := allocated(func() {
		if err := m.Add(Worker{ID: "w", KVEndpoint: fmt.Sprintf("@tcp://127.0.0.1:%d", port)}); err != nil {
			t.Fatal(err)
		}
		for range 30 {
			nc, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, nc)
			nc.Write(attack)
		}
		eventually(t, "every attacker refused or dropped", func() bool { return status(t, m, "w").Dropped == 30 })
	})
	t.Logf("30 silent peers announcing 60 MiB frames: %.1f MiB allocated", float64(a)/(1<<20))
	if a > 16<<20 {
		t.Errorf("%d MiB allocated", a>>20)
	}
	d := dropped(t, reg, "w")
	if d["stalled"] != 1 || d["second_publisher"]+d["handshakes"] != 29 {
		t.Errorf("dropped %v: want 1 stalled, 29 refused", d)
	}

	p := dialPub(t, port)
	warmUp(t, m, "w", func() uint64 { return p.publish(t, nil) })
	e := newEngine(5)
	_, ev := e.store(nil, 3)
	waitSeq(t, m, "w", p.publish(t, []map[string]any{ev}))
	checkTruth(t, idx, kv.WorkerRank{ID: "w"}, e)
}

// TestOnePublisher: while a bound rank's publisher is live, another
// publisher's connections are refused and counted; the first one's batches
// go on being applied.
func TestOnePublisher(t *testing.T) {
	m, idx, reg := newTestManager(t, true)
	port := freePort(t)
	if err := m.Add(Worker{ID: "w", KVEndpoint: fmt.Sprintf("@tcp://127.0.0.1:%d", port)}); err != nil {
		t.Fatal(err)
	}
	p := dialPub(t, port)
	warmUp(t, m, "w", func() uint64 { return p.publish(t, nil) })

	// A second publisher: its handshake and a batch that would clear the
	// rank. (go-zeromq's Dial fails on a refused connection, so it is raw.)
	clearAll := appendZMTPMessage(nil, 0, encodeBatch(t, []map[string]any{{"type": "AllBlocksCleared"}}, 0))
	for i := range 3 {
		nc, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(append(pubReady(), clearAll...))
		eventually(t, "the second publisher refused", func() bool {
			return dropped(t, reg, "w")["second_publisher"] == float64(i+1)
		})
		nc.Close()
	}

	e := newEngine(9)
	_, ev := e.store(nil, 4)
	waitSeq(t, m, "w", p.publish(t, []map[string]any{ev}))
	checkTruth(t, idx, kv.WorkerRank{ID: "w"}, e)
	if st := status(t, m, "w"); st.Reconnects != 0 || st.EngineRestarts != 0 {
		t.Errorf("status %+v: the live publisher was disturbed", st)
	}
}

// TestHandshakeLimits: connections that say nothing occupy at most
// MaxHandshakes handshakes (the rest are refused at once) and each is
// dropped after HandshakeTimeout; a handshake frame claiming megabytes is
// refused before anything is allocated for it.
func TestHandshakeLimits(t *testing.T) {
	idx := radix.New(radix.Config{CheckInvariants: true})
	// HandshakeTimeout is longer than the 5 dials can take on a loaded
	// machine: the first two timed out before the last dial would free a
	// slot for it.
	m, reg := newTestManagerWith(t, idx, func(c *Config) {
		c.MaxHandshakes = 2
		c.HandshakeTimeout = time.Second
	})
	port := freePort(t)
	if err := m.Add(Worker{ID: "w", KVEndpoint: fmt.Sprintf("@tcp://127.0.0.1:%d", port)}); err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	for range 5 {
		nc, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
	}
	eventually(t, "the silent handshakes dropped", func() bool { return status(t, m, "w").Dropped == 5 })
	if d := dropped(t, reg, "w"); d["handshakes"] != 3 || d["handshake"] != 2 {
		t.Errorf("dropped %v: want 3 refused, 2 timed out", d)
	}

	// A READY command claiming 60 MiB, then silence.
	g := zmtpGreeting()
	g[32] = 0
	nc, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, nc)
	a := allocated(func() {
		nc.Write(append(g, binary.BigEndian.AppendUint64([]byte{0x6}, 60<<20)...))
		eventually(t, "the oversized READY refused", func() bool { return status(t, m, "w").Dropped == 6 })
	})
	if a > 4<<20 {
		t.Errorf("a READY claiming 60 MiB cost %d bytes", a)
	}

	p := dialPub(t, port)
	warmUp(t, m, "w", func() uint64 { return p.publish(t, nil) })
}

// TestStalledMessage: a publisher that starts a message and stops sending
// mid-frame is dropped after FrameTimeout and redialled; one that is idle
// between messages for longer than that is not.
func TestStalledMessage(t *testing.T) {
	idx := radix.New(radix.Config{CheckInvariants: true})
	const frameTimeout = 300 * time.Millisecond
	m, reg := newTestManagerWith(t, idx, func(c *Config) { c.FrameTimeout = frameTimeout })
	e := newEngine(11)
	idle := make(chan struct{})
	port := rawPub(t,
		func(nc net.Conn) {
			if pubHandshake(t, nc) == nil {
				return
			}
			msg := appendZMTPMessage(nil, 0, make([]byte, 1<<20))
			nc.Write(msg[:len(msg)/2])
		},
		func(nc net.Conn) {
			c := pubHandshake(t, nc)
			if c == nil {
				return
			}
			_, ev := e.store(nil, 2)
			c.send(nil, seqFrame(0), encodeBatch(t, []map[string]any{ev}, 0))
			<-idle // the test's idle period, longer than FrameTimeout
			_, ev = e.store(nil, 2)
			c.send(nil, seqFrame(1), encodeBatch(t, []map[string]any{ev}, 0))
		})
	if err := m.Add(Worker{ID: "w", KVEndpoint: fmt.Sprintf(">tcp://127.0.0.1:%d", port)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stalled connection dropped", func() bool { return dropped(t, reg, "w")["stalled"] == 1 })
	eventually(t, "the first batch after the redial", func() bool { return status(t, m, "w").EventsApplied == 1 })
	// Idle between two messages: the connection stays. The idle period is
	// the scenario itself, not a wait for the router.
	time.Sleep(5 * frameTimeout)
	close(idle)
	waitSeq(t, m, "w", 1)
	checkTruth(t, idx, kv.WorkerRank{ID: "w"}, e)
	if st := status(t, m, "w"); st.Reconnects != 1 || st.Dropped != 1 {
		t.Errorf("status %+v: want one redial, for the stalled message only", st)
	}
}

// TestQueueBudget: with the appliers blocked, ranks queue at most
// QueueBytes of batches between them: their readers wait (TCP holds the
// rest) and nothing is lost once the appliers go on.
func TestQueueBudget(t *testing.T) {
	// The index is checked once, at the end: checked after each of its
	// 32,000 block writes the applies took seconds, and most of waitFor
	// on a loaded machine.
	idx := radix.New(radix.Config{})
	const budgetBytes = 512 << 10
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	defer open()
	m, reg := newTestManagerWith(t, idx, func(c *Config) {
		c.QueueBytes = budgetBytes
		c.MaxMessageBytes = 256 << 10
		c.newSink = func(w kv.WorkerRank) sink {
			return &gateSink{sink: newIndexSink(idx, w, testBlockSize, 0, nil), gate: gate}
		}
	})
	const batches = 40
	engines := map[string]*engine{}
	for i, id := range []string{"a", "b"} {
		e := newEngine(uint64(20 + i))
		engines[id] = e
		var payloads [][]byte
		for range batches {
			_, ev := e.store(nil, 400) // about 20 KiB
			payloads = append(payloads, encodeBatch(t, []map[string]any{ev}, 0))
		}
		port := rawPub(t, func(nc net.Conn) {
			c := pubHandshake(t, nc)
			for seq, p := range payloads {
				if c == nil || c.send(nil, seqFrame(uint64(seq)), p) != nil {
					return
				}
			}
		})
		if err := m.Add(Worker{ID: id, KVEndpoint: fmt.Sprintf(">tcp://127.0.0.1:%d", port)}); err != nil {
			t.Fatal(err)
		}
	}
	var peak int64
	eventually(t, "both readers waiting for the budget", func() bool {
		peak = max(peak, m.budget.queued())
		return status(t, m, "a").BudgetWaits > 0 && status(t, m, "b").BudgetWaits > 0
	})
	if peak > budgetBytes {
		t.Errorf("%d bytes queued, budget %d", peak, budgetBytes)
	}
	if g := gaugeOf(t, reg, "kvrouter_ingest_queued_bytes"); g <= 0 || g > budgetBytes {
		t.Errorf("queued_bytes gauge %v", g)
	}
	open()
	for id, e := range engines {
		waitSeq(t, m, id, batches-1)
		checkTruth(t, idx, kv.WorkerRank{ID: id}, e)
	}
	if err := idx.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the budget given back", func() bool { return m.budget.queued() == 0 })
}

// gaugeOf reads an unlabelled gauge.
func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestBudgetOrder: waiters are served in order (a large message is not
// starved by small ones), a waiter whose rank stops leaves, and what it was
// granted meanwhile is given back.
func TestBudgetOrder(t *testing.T) {
	b := newBudget(100, nil)
	ctx := context.Background()
	if n, waited := b.take(ctx, 90, nil); n != 90 || waited {
		t.Fatalf("take 90: %d %v", n, waited)
	}
	got := make(chan int64, 2)
	var wg sync.WaitGroup
	take := func(n int64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			took, _ := b.take(ctx, n, nil)
			got <- took
		}()
	}
	take(50)
	eventually(t, "the large waiter queued", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.waiters) == 1 })
	take(5) // fits, but waits behind the large one
	eventually(t, "the small waiter queued", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.waiters) == 2 })
	b.give(90)
	wg.Wait()
	if a, c := <-got, <-got; a+c != 55 {
		t.Errorf("granted %d and %d", a, c)
	}
	if q := b.queued(); q != 55 {
		t.Errorf("queued %d, want 55", q)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan int64)
	go func() { n, _ := b.take(cctx, 60, nil); done <- n }()
	eventually(t, "the waiter queued", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.waiters) == 1 })
	cancel()
	if n := <-done; n != 0 {
		t.Errorf("a cancelled take took %d", n)
	}
	b.give(55)
	if q := b.queued(); q != 0 {
		t.Errorf("queued %d after giving everything back", q)
	}
	if n, _ := b.take(ctx, 1000, nil); n != 100 {
		t.Errorf("an oversized take took %d, want the whole budget", n)
	}
}

// replayStarts asks the publisher which replays it was asked for.
func replayStarts(p *pyPub) []uint64 {
	out := p.call(map[string]any{"op": "requests"})
	var starts []uint64
	for _, v := range out["starts"].([]any) {
		starts = append(starts, uint64(v.(float64)))
	}
	return starts
}

// TestCatchUpLimited: a reconnect within CatchUpInterval of a full catch-up
// asks libzmq's replay buffer from the last applied seq, not from 0; with
// no limit it asks from 0 again. Either way nothing is lost or cleared.
func TestCatchUpLimited(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
		limited  bool
	}{{"limited", 0, true}, {"no limit", -1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			idx := radix.New(radix.Config{CheckInvariants: true})
			m, _ := newTestManagerWith(t, idx, func(c *Config) { c.CatchUpInterval = tc.interval })
			p := startPy(t, "--pub", "tcp://*:0", "--replay", "tcp://*:0")
			px := newProxy(t, fmt.Sprintf("127.0.0.1:%d", p.PubPort))
			if err := m.Add(Worker{ID: "w", KVEndpoint: fmt.Sprintf(">tcp://127.0.0.1:%d", px.port()),
				ReplayEndpoint: fmt.Sprintf(">tcp://127.0.0.1:%d", p.ReplayPort)}); err != nil {
				t.Fatal(err)
			}
			warmUp(t, m, "w", func() uint64 { return p.publish(nil, false) })
			e := newEngine(13)
			a, ev := e.store(nil, 3)
			last := p.publish([]map[string]any{ev}, false)
			waitSeq(t, m, "w", last)

			n := len(replayStarts(p)) // the first catch-up, and gaps while warming up
			px.cut()
			_, ev = e.store(a, 2)
			p.publish([]map[string]any{ev}, true) // missed while away
			eventually(t, "the reconnect's catch-up", func() bool { return len(replayStarts(p)) == n+1 })
			seq := p.publish([]map[string]any{e.remove(a, 1)}, false)
			flush(t, m, "w", seq, func() uint64 { return p.publish(nil, false) })
			checkTruth(t, idx, kv.WorkerRank{ID: "w"}, e)

			starts := replayStarts(p)
			st := status(t, m, "w")
			want := uint64(0)
			if tc.limited {
				want = last
			}
			if starts[0] != 0 || starts[n] != want {
				t.Errorf("replays asked from %v: want the first from 0, the reconnect's (#%d) from %d", starts, n, want)
			}
			if lim := st.CatchUpsLimited; (lim == 1) != tc.limited || st.EngineRestarts != 0 || st.ReplayFailures != 0 {
				t.Errorf("status %+v", st)
			}
		})
	}
}

// TestUndecodableBatch: a live batch that does not decode is a gap. When the
// engine's buffered copy decodes it is applied from the replay (nothing
// lost); when it does not either, the rank is cleared and rebuilt from what
// follows. libzmq publisher, replay buffer.
func TestUndecodableBatch(t *testing.T) {
	m, idx, _ := newTestManager(t, true)
	p := startPy(t, "--pub", "tcp://*:0", "--replay", "tcp://*:0")
	// A registered capacity well above what the test stores: the rank,
	// once inexact, keeps growing (a learned one would be the 5 blocks it
	// held while exact).
	if err := m.Add(Worker{ID: "w", KVEndpoint: fmt.Sprintf(">tcp://127.0.0.1:%d", p.PubPort),
		ReplayEndpoint: fmt.Sprintf(">tcp://127.0.0.1:%d", p.ReplayPort), CapacityTokens: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	warmUp(t, m, "w", func() uint64 { return p.publish(nil, false) })
	e := newEngine(17)
	w := kv.WorkerRank{ID: "w"}
	a, ev := e.store(nil, 3)
	waitSeq(t, m, "w", p.publish([]map[string]any{ev}, false))
	before := status(t, m, "w")

	// The live copy is garbage, the buffered one is not.
	_, ev = e.store(a, 2)
	out := p.call(map[string]any{"op": "publish", "events": []map[string]any{ev}, "live_payload_hex": "c1"})
	seq := uint64(out["seq"].(float64))
	waitSeq(t, m, "w", seq)
	checkTruth(t, idx, w, e)
	st := status(t, m, "w")
	if st.Gaps != before.Gaps+1 || st.DecodeErrors != before.DecodeErrors+1 || st.ReplayFailures != 0 ||
		st.Replays != before.Replays+1 {
		t.Errorf("status %+v (before %+v): want a gap replayed", st, before)
	}
	if starts := replayStarts(p); starts[len(starts)-1] != seq {
		t.Errorf("replays asked from %v, want the last from %d", starts, seq)
	}

	// Both copies are garbage: lost. The rank keeps its blocks, inexact
	// since the lost batch, and applies what follows.
	out = p.call(map[string]any{"op": "publish", "payload_hex": hex.EncodeToString([]byte{0x91, 0xc1})})
	lost := uint64(out["seq"].(float64))
	_, ev = e.store(nil, 4)
	seq = p.publish([]map[string]any{ev}, false)
	waitSeq(t, m, "w", seq)
	checkTruth(t, idx, w, e)
	if st := status(t, m, "w"); st.ReplayFailures != 1 || st.DecodeErrors != before.DecodeErrors+3 ||
		!st.Inexact || st.InexactSinceSeq != lost {
		t.Errorf("status %+v: want the batch lost once (its live and its replayed copy undecodable), "+
			"the rank inexact since %d", st, lost)
	}
}

// TestMaxBatchEventsConfig: Config.MaxBatchEvents reaches the normalizer.
func TestMaxBatchEventsConfig(t *testing.T) {
	idx := radix.New(radix.Config{})
	s := newIndexSink(idx, kv.WorkerRank{ID: "w"}, testBlockSize, 8, nil)
	var st batchStats
	if err := s.apply(emptyEventsBatch(9), &st); err == nil {
		t.Error("9 events accepted with MaxBatchEvents 8")
	}
	if err := s.apply(emptyEventsBatch(8), &st); err != nil || st.decodeErrors != 8 {
		t.Errorf("8 empty events: %v, %d event errors", err, st.decodeErrors)
	}
	if normalize.DefaultMaxEvents >= 4<<20 {
		t.Error("the default bound does not refuse the 4M-event batch")
	}
}

// TestPing: a publisher's ZMTP heartbeat (PING) is answered with a PONG
// carrying its context, and batches go on after it.
func TestPing(t *testing.T) {
	m, idx, _ := newTestManager(t, true)
	e := newEngine(23)
	pong := make(chan []byte, 1)
	port := rawPub(t, func(nc net.Conn) {
		c := pubHandshake(t, nc)
		if c == nil {
			return
		}
		body := append(append([]byte{4}, "PING"...), 0, 10, 'a', 'b', 'c')
		nc.Write(append([]byte{0x4, byte(len(body))}, body...))
		f, _, cmd, err := c.recv()
		if err != nil || !cmd {
			t.Errorf("no PONG: %v", err)
			return
		}
		pong <- f[0]
		_, ev := e.store(nil, 2)
		c.send(nil, seqFrame(0), encodeBatch(t, []map[string]any{ev}, 0))
		c.send(nil, seqFrame(1), encodeBatch(t, nil, 0))
	})
	if err := m.Add(Worker{ID: "w", KVEndpoint: fmt.Sprintf(">tcp://127.0.0.1:%d", port)}); err != nil {
		t.Fatal(err)
	}
	waitSeq(t, m, "w", 1)
	if got, want := string(<-pong), "\x04PONGabc"; got != want {
		t.Errorf("PONG %q, want %q", got, want)
	}
	checkTruth(t, idx, kv.WorkerRank{ID: "w"}, e)
}
