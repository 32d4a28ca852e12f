package scoring

import (
	"fmt"
	"testing"
)

// TestPendingSumFollowsTheModelList checks the kept per-model sum of pending
// prefills is the sum over the model's list at every step: requests routed,
// one prefill-done, and a worker with pending requests removed, including
// between its leaving the list and its requests' release (RemoveWorker's two
// parts), where a Route already sees the list without it.
func TestPendingSumFollowsTheModelList(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Policy = PolicyTime })
	f.addWorker("a", "m", 2)
	f.addWorker("b", "m", 1)
	f.addWorker("c", "other", 1)
	check := func(when string, want map[string]int64) {
		t.Helper()
		f.r.mu.Lock()
		unlock := f.r.lockModels()
		err := f.r.checkPending()
		got := fmt.Sprint(f.r.pendingByModel())
		unlock()
		f.r.mu.Unlock()
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if got != fmt.Sprint(want) {
			t.Fatalf("%s: pending %s, want %v", when, got, want)
		}
	}
	check("no requests", map[string]int64{})
	chosen := map[string]int64{}
	for i := range 6 {
		dec, err := f.r.Route(&Prompt{Model: "m", Tokens: tokens(uint32(i*1000), 4*bs)}, fmt.Sprintf("q%d", i), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		chosen[dec.WorkerID]++
	}
	if _, err := f.r.Route(&Prompt{Model: "other", Tokens: tokens(7, 4*bs)}, "o", 0, 0); err != nil {
		t.Fatal(err)
	}
	check("routed", map[string]int64{"m": 6, "other": 1})
	if err := f.r.MarkPrefillDone("o"); err != nil {
		t.Fatal(err)
	}
	check("other's prefill done", map[string]int64{"m": 6})
	if chosen["a"] == 0 {
		t.Fatalf("no request on a (%v): the removal below would test nothing", chosen)
	}
	wk, ok := f.r.unregister("a")
	if !ok {
		t.Fatalf("unregister a: not registered")
	}
	check("a off the list, its requests not yet released", map[string]int64{"m": 6 - chosen["a"]})
	for _, rk := range wk.ranks { // (the rest of RemoveWorker)
		rk.model.overlay.removeRank(rk.slot)
	}
	f.r.load.dropWorker(wk)
	check("a's requests released", map[string]int64{"m": 6 - chosen["a"]})
	f.r.RemoveWorker("b")
	check("b removed", map[string]int64{})
	if err := f.r.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}
