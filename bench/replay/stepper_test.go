package replay

import (
	"github.com/kvrouter/kvrouter/bench/harness"

	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/engine"
	"github.com/kvrouter/kvrouter/bench/trace"
)

func vllmFleet(t *testing.T, n, blocks int) *harness.Fleet {
	t.Helper()
	fleet, err := harness.StartFleet(harness.FleetConfig{Engines: n, Engine: engine.Config{CapacityBlocks: blocks, Model: engine.ModelVLLM}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Close)
	return fleet
}

// burstyTrace arrives in bursts of 5 requests within a millisecond, so
// batches form and the step time depends on who shares a step.
func burstyTrace() []trace.Request {
	var reqs []trace.Request
	for i := 0; i < 30; i++ {
		reqs = append(reqs, trace.Request{
			Arrival:     time.Duration(i/5)*200*time.Millisecond + time.Duration(i%5)*100*time.Microsecond,
			InputLength: 1500, OutputLength: 20,
			HashIDs: []uint64{1, uint64(10 + i%7)},
		})
	}
	return reqs
}

// TestPlayVLLMIndependentOfSpeed: a vLLM-model engine's batches wait for
// the watermark, not for wall time, so the simulated TTFTs of a replay do
// not depend on how fast it is played.
func TestPlayVLLMIndependentOfSpeed(t *testing.T) {
	var runs [][]time.Duration
	for _, speed := range []float64{50, 100000} {
		fleet := vllmFleet(t, 3, 2000)
		pr, err := Play(context.Background(), PlayConfig{Fleet: fleet, Requests: burstyTrace(), Clock: Clock{T0: time.Now(), SpeedUp: speed}, Choose: RoundRobin(3)})
		if err != nil {
			t.Fatal(err)
		}
		if len(pr.TTFT) != 30 || pr.Dropped != 0 || pr.PublishErrs != 0 {
			t.Fatalf("speed %v: %d TTFTs, %d dropped, %d publish errors (%s)", speed, len(pr.TTFT), pr.Dropped, pr.PublishErrs, pr.FirstError)
		}
		slices.Sort(pr.TTFT)
		runs = append(runs, pr.TTFT)
		tot := fleet.Totals()
		if tot.Requests != 30 || tot.PromptBlocks != 30*93 || tot.CachedBlocks == 0 {
			t.Fatalf("speed %v: totals %+v", speed, tot)
		}
	}
	if !slices.Equal(runs[0], runs[1]) {
		t.Fatalf("TTFTs differ with the replay speed:\n%v\n%v", runs[0], runs[1])
	}
	// A burst shares steps: its last request waits for the others' prefills.
	if runs[0][len(runs[0])-1] <= 2*runs[0][0] {
		t.Fatalf("no queueing within bursts: TTFTs %v", runs[0])
	}
}

func TestPlayVLLMWithRouter(t *testing.T) {
	fr, _, addr := serveFake(t)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rc := kvrouterv1.NewRouterClient(cc)
	fleet := vllmFleet(t, 2, 1000)
	reqs := smallTrace()
	// One request too long for an engine's 1,000 blocks: refused, counted,
	// and the router is still told it finished.
	reqs[7].InputLength = 20000
	pr, err := Play(context.Background(), PlayConfig{
		Fleet: fleet, Requests: reqs, Clock: Clock{T0: time.Now(), SpeedUp: 100},
		Choose: RouterChooser(rc, fleet, "m"), Router: rc, IDPrefix: "t-",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.TTFT) != 19 || pr.Dropped != 1 || pr.MarkErrors != 0 || !strings.Contains(pr.FirstError, "more KV blocks") {
		t.Fatalf("ttft %d, dropped %d, mark errors %d (%s)", len(pr.TTFT), pr.Dropped, pr.MarkErrors, pr.FirstError)
	}
	fr.mu.Lock()
	defer fr.mu.Unlock()
	for id, seq := range fr.order {
		want := "route,prefill,finish"
		if id == "t-7" {
			want = "route,finish"
		}
		if strings.Join(seq, ",") != want {
			t.Errorf("%s: calls %v, want %s", id, seq, want)
		}
	}
	if len(fr.order) != 20 {
		t.Errorf("%d requests tracked, want 20", len(fr.order))
	}
}

func TestPlayVLLMCancel(t *testing.T) {
	fleet := vllmFleet(t, 2, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Play(ctx, PlayConfig{Fleet: fleet, Requests: smallTrace(), Clock: Clock{T0: time.Now(), SpeedUp: 0.001}, Choose: RoundRobin(2)})
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("cancelled play returned nil")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled play did not return")
	}
}

// TestPlayVLLMTPOT: every request of more than one output token reports its
// time per output token, and a burst piled on one engine decodes slower than
// the same burst spread over three (its steps carry the others' decodes and
// KV reads), which is what the TPOT column is there to show.
func TestPlayVLLMTPOT(t *testing.T) {
	p50 := map[string]time.Duration{}
	for name, choose := range map[string]ChooseFunc{
		"spread": RoundRobin(3),
		"piled":  func(context.Context, int, []uint32, string) (Choice, error) { return Choice{Engine: 0}, nil },
	} {
		fleet := vllmFleet(t, 3, 2000)
		pr, err := Play(context.Background(), PlayConfig{Fleet: fleet, Requests: burstyTrace(), Clock: Clock{T0: time.Now(), SpeedUp: 100000}, Choose: choose})
		if err != nil {
			t.Fatal(err)
		}
		if len(pr.TPOT) != 30 || pr.Dropped != 0 {
			t.Fatalf("%s: %d TPOTs for 30 requests, %d dropped (%s)", name, len(pr.TPOT), pr.Dropped, pr.FirstError)
		}
		slices.Sort(pr.TPOT)
		if pr.TPOT[0] <= 0 {
			t.Fatalf("%s: TPOT %v", name, pr.TPOT[0])
		}
		p50[name] = pr.TPOT[15]
	}
	if p50["piled"] <= p50["spread"] {
		t.Fatalf("TPOT p50 piled %v, spread %v: a piled engine decodes no slower", p50["piled"], p50["spread"])
	}
	t.Logf("TPOT p50: piled %v, spread %v", p50["piled"], p50["spread"])
}
