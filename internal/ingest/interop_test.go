package ingest

import (
	"encoding/hex"
	"fmt"
	"net"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/prometheus/client_golang/prometheus"
)

// These tests run the Go subscriber against testdata/publisher.py, a libzmq
// publisher that behaves like vLLM's, and compare the index with the
// engine's ground truth.

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// pubSetup describes one publisher configuration.
type pubSetup struct {
	name       string
	form       string // array or map
	replay     int    // 0: none, 3 or 4: reply frames
	topic      string // publisher topic
	sub        string // router's topic prefix
	routerBind string // the router's endpoint (a format taking the port) when it binds and the engine connects
}

// start runs a publisher per s and registers it as worker id.
func (s pubSetup) start(t *testing.T, m *Manager, id string) *pyPub {
	t.Helper()
	args := []string{"--form", s.form, "--topic-hex", hex.EncodeToString([]byte(s.topic))}
	w := Worker{ID: id, Model: "m", Topic: s.sub}
	var p *pyPub
	if s.routerBind != "" {
		port := freePort(t)
		w.KVEndpoint = fmt.Sprintf(s.routerBind, port)
		if err := m.Add(w); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--pub", fmt.Sprintf("tcp://127.0.0.1:%d", port))
		if s.replay > 0 {
			t.Fatal("setup: router bind with replay is not modeled")
		}
		p = startPy(t, args...)
		return p
	}
	args = append(args, "--pub", "tcp://*:0")
	if s.replay > 0 {
		args = append(args, "--replay", "tcp://*:0")
		if s.replay == 4 {
			args = append(args, "--replay-topic")
		}
	}
	p = startPy(t, args...)
	w.KVEndpoint = fmt.Sprintf("tcp://127.0.0.1:%d", p.PubPort)
	if s.replay > 0 {
		w.ReplayEndpoint = fmt.Sprintf("tcp://127.0.0.1:%d", p.ReplayPort)
	}
	if err := m.Add(w); err != nil {
		t.Fatal(err)
	}
	return p
}

var interopSetups = []pubSetup{
	{name: "array", form: "array"},
	{name: "map", form: "map"},
	{name: "array_replay3", form: "array", replay: 3},
	{name: "map_replay4_topic", form: "map", replay: 4, topic: "kv@pod-1@model\x00sgl-kv-epoch=abc", sub: "kv@pod-1@model"},
	{name: "router_binds", form: "array", routerBind: "@tcp://127.0.0.1:%d"},
	// vLLM's literal tcp://*:5557 registered: the router binds every
	// interface and the engine connects to it.
	{name: "router_binds_wildcard", form: "array", routerBind: "tcp://*:%d"},
}

// TestInteropBasic: stores, extensions, removes and a clear from a libzmq
// publisher in every shape end up in the index exactly as the engine has them.
func TestInteropBasic(t *testing.T) {
	for i, s := range interopSetups {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			m, idx, reg := newTestManager(t, true)
			id := "w-" + s.name
			p := s.start(t, m, id)
			warmUp(t, m, id, func() uint64 { return p.publish(nil, false) })

			e := newEngine(uint64(i + 1))
			w := kv.WorkerRank{ID: id}
			a, evA := e.store(nil, 4)
			b, evB := e.store(a, 3)
			_, evC := e.store(nil, 2)
			p.publish([]map[string]any{evA, evB}, false)
			p.publish([]map[string]any{evC}, false)
			_, evD := e.store(b, 2)
			seq := p.publish([]map[string]any{evD, e.remove(b, 1)}, false)
			waitSeq(t, m, id, seq)
			checkTruth(t, idx, w, e)

			seq = p.publish([]map[string]any{e.clearAll()}, false)
			_, evE := e.store(nil, 5)
			seq = p.publish([]map[string]any{evE}, false)
			waitSeq(t, m, id, seq)
			checkTruth(t, idx, w, e)

			st := status(t, m, id)
			if !st.Connected || st.DecodeErrors != 0 || st.EngineRestarts != 0 {
				t.Errorf("status %+v", st)
			}
			if got := st.CachedBlocks; got != 5 {
				t.Errorf("CachedBlocks = %d, want 5", got)
			}
			if got := metricOf(t, reg, "kvrouter_ingest_blocks_stored_total", id); got < 16 {
				t.Errorf("blocks_stored_total = %v, want >= 16", got)
			}
		})
	}
}

// metricOf returns worker id's rank 0 series of a counter family.
func metricOf(t *testing.T, reg *prometheus.Registry, name, id string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.GetMetric() {
			var worker, rank string
			for _, l := range mm.GetLabel() {
				switch l.GetName() {
				case "worker":
					worker = l.GetValue()
				case "dp_rank":
					rank = l.GetValue()
				}
			}
			if worker == id && rank == "0" {
				if g := mm.GetGauge(); g != nil {
					return g.GetValue()
				}
				return mm.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s series for %s", name, id)
	return 0
}

// TestGapReplay: batches dropped on the live socket (but kept in the replay
// buffer) are replayed in order; the index ends equal to the engine.
func TestGapReplay(t *testing.T) {
	for _, replay := range []int{3, 4} {
		t.Run(fmt.Sprintf("replay%d", replay), func(t *testing.T) {
			t.Parallel()
			m, idx, _ := newTestManager(t, true)
			id := "gap"
			p := pubSetup{form: "array", replay: replay}.start(t, m, id)
			warmUp(t, m, id, func() uint64 { return p.publish(nil, false) })
			before := status(t, m, id)

			e := newEngine(7)
			w := kv.WorkerRank{ID: id}
			a, evA := e.store(nil, 3)
			p.publish([]map[string]any{evA}, false)
			// Lost on the live socket: an extension, a new sequence, a removal.
			b, evB := e.store(a, 2)
			p.publish([]map[string]any{evB}, true)
			c, evC := e.store(nil, 4)
			p.publish([]map[string]any{evC}, true)
			p.publish([]map[string]any{e.remove(c, 2)}, true)
			// Live again: a store whose parent only the replay knows.
			_, evD := e.store(b, 2)
			seq := p.publish([]map[string]any{evD}, false)
			_, evE := e.store(nil, 1)
			seq = p.publish([]map[string]any{evE}, false)
			waitSeq(t, m, id, seq)
			checkTruth(t, idx, w, e)

			st := status(t, m, id)
			if d := st.Gaps - before.Gaps; d != 1 {
				t.Errorf("gaps +%d, want +1", d)
			}
			if d := st.Replays - before.Replays; d != 1 {
				t.Errorf("replays +%d, want +1", d)
			}
			if st.ReplayFailures != before.ReplayFailures {
				t.Errorf("replay failures +%d, want 0", st.ReplayFailures-before.ReplayFailures)
			}
		})
	}
}

// TestLostHistory: a gap nothing can fill (no replay endpoint, or a replay
// buffer that no longer reaches back) keeps the worker's blocks, inexact;
// once the engine has stored its capacity since, the oldest claims are
// trimmed and the index equals what the engine really has, with no stale
// blocks, by the time LastSeq says the last batch was applied.
func TestLostHistory(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"no_replay", nil},
		{"buffer_too_short", []string{"--buffer", "2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, idx, _ := newTestManager(t, true)
			id := "lost"
			args := append([]string{"--pub", "tcp://*:0", "--form", "map"}, tc.args...)
			w := Worker{ID: id}
			if tc.args != nil {
				args = append(args, "--replay", "tcp://*:0")
			}
			p := startPy(t, args...)
			w.KVEndpoint = fmt.Sprintf("tcp://127.0.0.1:%d", p.PubPort)
			if p.ReplayPort != 0 {
				w.ReplayEndpoint = fmt.Sprintf("tcp://127.0.0.1:%d", p.ReplayPort)
			}
			if err := m.Add(w); err != nil {
				t.Fatal(err)
			}
			warmUp(t, m, id, func() uint64 { return p.publish(nil, false) })
			before := status(t, m, id)

			e := newEngine(11)
			rw := kv.WorkerRank{ID: id}
			a, evA := e.store(nil, 3)
			b, evB := e.store(nil, 2)
			p.publish([]map[string]any{evA, evB}, false)
			// The engine evicts both sequences; the router never hears of it.
			p.publish([]map[string]any{e.remove(a, 3)}, true)
			p.publish([]map[string]any{e.remove(b, 2)}, true)
			p.publish(nil, true)
			p.publish(nil, true)
			// What arrives next rebuilds the worker.
			c, evC := e.store(nil, 4)
			seq := p.publish([]map[string]any{evC}, false)
			_, evD := e.store(c, 1)
			seq = p.publish([]map[string]any{evD}, false)
			waitSeq(t, m, id, seq)
			checkTruth(t, idx, rw, e)

			st := status(t, m, id)
			if d := st.Gaps - before.Gaps; d != 1 {
				t.Errorf("gaps +%d, want +1", d)
			}
			if d := st.ReplayFailures - before.ReplayFailures; d != 1 {
				t.Errorf("replay failures +%d, want +1", d)
			}
		})
	}
}

// TestEngineRestart: the publisher process is killed and started again on
// the same port with seq from 0 and an empty cache; the router reconnects,
// notices, clears the worker and follows the new stream.
func TestEngineRestart(t *testing.T) {
	for _, withReplay := range []bool{false, true} {
		name := "live"
		if withReplay {
			name = "replay"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, idx, _ := newTestManager(t, true)
			id := "restart"
			args := []string{"--pub", "tcp://*:0"}
			if withReplay {
				args = append(args, "--replay", "tcp://*:0")
			}
			p := startPy(t, args...)
			w := Worker{ID: id, KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.PubPort)}
			if withReplay {
				w.ReplayEndpoint = fmt.Sprintf("tcp://127.0.0.1:%d", p.ReplayPort)
			}
			if err := m.Add(w); err != nil {
				t.Fatal(err)
			}
			warmUp(t, m, id, func() uint64 { return p.publish(nil, false) })

			e := newEngine(13)
			rw := kv.WorkerRank{ID: id}
			a, evA := e.store(nil, 3)
			p.publish([]map[string]any{evA}, false)
			var seq uint64
			for i := 0; i < 5; i++ {
				var ev map[string]any
				a, ev = e.store(a, 1)
				seq = p.publish([]map[string]any{ev}, false)
			}
			waitSeq(t, m, id, seq)
			checkTruth(t, idx, rw, e)
			before := status(t, m, id)

			p.kill()
			eventually(t, "the router to notice the publisher died", func() bool { return !status(t, m, id).Connected })

			args = []string{"--pub", fmt.Sprintf("tcp://*:%d", p.PubPort)}
			if withReplay {
				args = append(args, "--replay", fmt.Sprintf("tcp://*:%d", p.ReplayPort))
			}
			p = startPy(t, args...)
			e.forget()
			eventually(t, "the router to reconnect", func() bool { return status(t, m, id).Connected })
			// Publish until the router has seen the new incarnation.
			eventually(t, "the restart to be detected", func() bool {
				p.publish(nil, false)
				return status(t, m, id).EngineRestarts > before.EngineRestarts
			})
			b, evB := e.store(nil, 2)
			p.publish([]map[string]any{evB}, false)
			_, evC := e.store(b, 2)
			seq = p.publish([]map[string]any{evC}, false)
			flush(t, m, id, seq, func() uint64 { return p.publish(nil, false) })
			st := status(t, m, id)
			checkTruth(t, idx, rw, e)
			if d := st.EngineRestarts - before.EngineRestarts; d != 1 {
				t.Errorf("engine restarts +%d, want +1", d)
			}
			if st.Reconnects < before.Reconnects+1 {
				t.Errorf("reconnects %d, want > %d", st.Reconnects, before.Reconnects)
			}
		})
	}
}
