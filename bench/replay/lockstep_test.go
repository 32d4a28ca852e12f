package replay

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/harness"
)

// published is every engine's count of event batches published so far.
func published(fleet *harness.Fleet) []uint64 {
	v := make([]uint64, len(fleet.Engines))
	for i, e := range fleet.Engines {
		v[i] = e.Publisher().Seq()
	}
	return v
}

// lockstepViews replays burstyTrace in lockstep with every Route taking
// delay of wall time, and returns what each Route saw published, the
// TTFTs, and how many Routes saw something other than the last Settle.
func lockstepViews(t *testing.T, speed float64, delay time.Duration) (views [][]uint64, ttft []time.Duration, moved int) {
	t.Helper()
	fleet := vllmFleet(t, 3, 2000)
	reqs := burstyTrace()
	views = make([][]uint64, len(reqs))
	var mu sync.Mutex
	var settled []uint64
	rr := RoundRobin(3)
	choose := func(ctx context.Context, seq int, tokens []uint32, id string) (Choice, error) {
		v := published(fleet)
		time.Sleep(delay) // a slow router: the view must not depend on it
		mu.Lock()
		views[seq] = v
		if settled != nil && !slices.Equal(v, settled) {
			moved++
		}
		mu.Unlock()
		return rr(ctx, seq, tokens, id)
	}
	settle := func(context.Context) error {
		mu.Lock()
		settled = published(fleet)
		mu.Unlock()
		return nil
	}
	pr, err := Play(context.Background(), PlayConfig{Fleet: fleet, Requests: reqs, Clock: Clock{T0: time.Now(), SpeedUp: speed},
		Choose: choose, Lockstep: true, Settle: settle})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.TTFT) != len(reqs) || pr.Dropped != 0 || pr.PublishErrs != 0 {
		t.Fatalf("speed %v, delay %v: %d TTFTs, %d dropped, %d publish errors (%s)", speed, delay, len(pr.TTFT), pr.Dropped, pr.PublishErrs, pr.FirstError)
	}
	if delay > 0 && pr.Paused == 0 {
		t.Fatalf("speed %v, delay %v: the clock never paused", speed, delay)
	}
	slices.Sort(pr.TTFT)
	return views, pr.TTFT, moved
}

// TestLockstepRoutesSeeTheirArrival: in lockstep, what a Route sees the
// engines publish is what they publish by its arrival, whether Routes take
// no time or a tenth of the gap between bursts, at either speed; and it is
// what the routers were last settled on.
func TestLockstepRoutesSeeTheirArrival(t *testing.T) {
	base, baseTTFT, moved := lockstepViews(t, 50, 0)
	if moved != 0 {
		t.Fatalf("%d Routes saw batches published after the last settle", moved)
	}
	if slices.Equal(base[0], base[len(base)-1]) {
		t.Fatalf("no batch published during the replay: %v", base)
	}
	for _, c := range []struct {
		speed float64
		delay time.Duration
	}{{50, 3 * time.Millisecond}, {20, time.Millisecond}} {
		views, ttft, moved := lockstepViews(t, c.speed, c.delay)
		name := fmt.Sprintf("speed %v, delay %v", c.speed, c.delay)
		if moved != 0 {
			t.Fatalf("%s: %d Routes saw batches published after the last settle", name, moved)
		}
		for i := range views {
			if !slices.Equal(views[i], base[i]) {
				t.Fatalf("%s: request %d saw %v published, want %v", name, i, views[i], base[i])
			}
		}
		if !slices.Equal(ttft, baseTTFT) {
			t.Fatalf("%s: TTFTs differ:\n%v\n%v", name, ttft, baseTTFT)
		}
	}
}

func TestLockstepNeedsTheVLLMModel(t *testing.T) {
	fleet, err := harness.StartFleet(harness.FleetConfig{Engines: 1, Engine: engine.Config{CapacityBlocks: 1000, PrefillPerToken: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	_, err = Play(context.Background(), PlayConfig{Fleet: fleet, Requests: smallTrace(), Clock: Clock{T0: time.Now(), SpeedUp: 100},
		Choose: RoundRobin(1), Lockstep: true})
	if err == nil {
		t.Fatal("lockstep on the old engine model: no error")
	}
}
