package ingest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// TestGarbage: malformed messages on the live socket are counted and skipped,
// and the subscription keeps working. A batch whose payload does not decode
// is a gap, not a batch applied: without a replay endpoint the rank is
// cleared and rebuilt from what follows.
func TestGarbage(t *testing.T) {
	m, idx, _ := newTestManager(t, true)
	p := newGoPub(t)
	id := "garbage"
	if err := m.Add(Worker{ID: id, KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.port)}); err != nil {
		t.Fatal(err)
	}
	warmUp(t, m, id, func() uint64 { return p.publish(t, nil) })
	before := status(t, m, id)

	e := newEngine(3)
	_, ev := e.store(nil, 3)
	good := encodeBatch(t, []map[string]any{ev}, 0)
	junk := []byte{0xc1, 0x00, 0xff, 0x13, 0x37} // 0xc1 is never valid msgpack
	p.mu.Lock()
	sends := [][][]byte{
		{junk},                                     // one frame
		{nil, seqFrame(p.seq)},                     // two frames
		{nil, seqFrame(p.seq), good, good},         // four frames
		{nil, seqFrame(p.seq)[:7], good},           // 7-byte seq
		{nil, seqFrame(p.seq), good[:len(good)/2]}, // truncated msgpack (a gap)
		{nil, seqFrame(p.seq + 1), junk},           // not msgpack (a gap)
	}
	p.seq += 2
	for _, f := range sends {
		if err := p.send(f...); err != nil {
			t.Fatal(err)
		}
	}
	p.mu.Unlock()
	seq := p.publish(t, []map[string]any{ev})
	waitSeq(t, m, id, seq)
	checkTruth(t, idx, kv.WorkerRank{ID: id}, e)

	st := status(t, m, id)
	if d := st.DecodeErrors - before.DecodeErrors; d != 6 {
		t.Errorf("decode errors +%d, want +6", d)
	}
	if !st.Connected || st.Gaps != before.Gaps+2 || st.ReplayFailures != before.ReplayFailures+2 || st.EngineRestarts != 0 {
		t.Errorf("status after garbage: %+v", st)
	}
}

// TestManyWorkers: 64 publishers at once; some workers are unregistered and
// registered again while events flow. Stable workers end equal to their
// engines; removed workers leave nothing in the index. Run under -race.
func TestManyWorkers(t *testing.T) {
	const (
		n       = 64
		churned = 16 // workers [0, churned) are removed and added repeatedly
		batches = 40
		rounds  = 4
	)
	m, idx, _ := newTestManager(t, false)
	pubs := make([]*goPub, n)
	ids := make([]string, n)
	for i := range pubs {
		pubs[i] = newGoPub(t)
		ids[i] = fmt.Sprintf("w%02d", i)
		if err := m.Add(Worker{ID: ids[i], KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", pubs[i].port)}); err != nil {
			t.Fatal(err)
		}
	}

	stopChurnPubs := publishUntilStopped(t, pubs[:churned])

	var wg sync.WaitGroup
	engines := make([]*engine, n)
	last := make([]uint64, n)
	for i := churned; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			warmUp(t, m, ids[i], func() uint64 { return pubs[i].publish(t, nil) })
			e := newEngine(uint64(i))
			for b := 0; b < batches; b++ {
				_, ev := e.store(nil, 2)
				last[i] = pubs[i].publish(t, []map[string]any{ev})
			}
			engines[i] = e
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := 0; r < rounds; r++ {
			if !removeAndAdd(t, m, idx, ids[:churned], pubs[:churned]) {
				return
			}
		}
	}()
	wg.Wait()
	if t.Failed() {
		stopChurnPubs()
		return
	}
	for i := churned; i < n; i++ {
		waitSeq(t, m, ids[i], last[i])
		checkTruth(t, idx, kv.WorkerRank{ID: ids[i]}, engines[i])
		st := status(t, m, ids[i])
		if st.Gaps != 0 || st.DecodeErrors != 0 || !st.Connected {
			t.Errorf("%s: %+v", ids[i], st)
		}
	}
	for i := 0; i < churned; i++ {
		if err := m.Remove(ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	stopChurnPubs()
	for _, w := range idx.Workers() {
		var i int
		if _, err := fmt.Sscanf(w.ID, "w%02d", &i); err != nil || i < churned {
			t.Errorf("index still holds removed worker %v", w)
		}
	}
}

// publishUntilStopped has each publisher publish a store event every
// millisecond until the returned function is called (it waits for them).
func publishUntilStopped(t *testing.T, pubs []*goPub) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := newEngine(uint64(100 + i))
			for {
				select {
				case <-done:
					return
				default:
				}
				_, ev := e.store(nil, 2)
				p.publish(t, []map[string]any{ev})
				time.Sleep(time.Millisecond) // pacing: zmq4's PUB queue is unbounded
			}
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// removeAndAdd removes each worker, checks that it left nothing, and adds it
// again. It reports false when Remove or Add failed.
func removeAndAdd(t *testing.T, m *Manager, idx *radix.Index, ids []string, pubs []*goPub) bool {
	for i, id := range ids {
		if err := m.Remove(id); err != nil {
			t.Error(err)
			return false
		}
		if got := idx.Cached(kv.WorkerRank{ID: id}); got != 0 {
			t.Errorf("%s holds %d blocks after Remove", id, got)
		}
		if m.Status(id) != nil {
			t.Errorf("%s has a status after Remove", id)
		}
		if err := m.Add(Worker{ID: id, KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", pubs[i].port)}); err != nil {
			t.Error(err)
			return false
		}
	}
	return true
}

// TestTopicEpochRestart: SGLang appends "\x00sgl-kv-epoch=<uuid>" to the
// topic; a new epoch is a new engine incarnation even when its seq does not
// go backwards.
func TestTopicEpochRestart(t *testing.T) {
	m, idx, _ := newTestManager(t, true)
	p := newGoPub(t)
	id := "epoch"
	if err := m.Add(Worker{ID: id, KVEndpoint: fmt.Sprintf("tcp://127.0.0.1:%d", p.port), Topic: "kv"}); err != nil {
		t.Fatal(err)
	}
	send := func(epoch string, seq uint64, events []map[string]any) {
		if err := p.send([]byte("kv\x00sgl-kv-epoch="+epoch), seqFrame(seq), encodeBatch(t, events, 0)); err != nil {
			t.Fatal(err)
		}
	}
	var seq uint64
	warmUp(t, m, id, func() uint64 { seq++; send("a", seq, nil); return seq })
	e := newEngine(21)
	_, ev := e.store(nil, 3)
	seq++
	send("a", seq, []map[string]any{ev})
	waitSeq(t, m, id, seq)
	checkTruth(t, idx, kv.WorkerRank{ID: id}, e)
	before := status(t, m, id)

	e.forget()
	_, ev = e.store(nil, 2)
	seq += 5 // the new incarnation happens to be further along
	send("b", seq, []map[string]any{ev})
	waitSeq(t, m, id, seq)
	checkTruth(t, idx, kv.WorkerRank{ID: id}, e)
	if d := status(t, m, id).EngineRestarts - before.EngineRestarts; d != 1 {
		t.Errorf("engine restarts +%d, want +1", d)
	}
}
