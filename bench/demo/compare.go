package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/bench/harness"
	"github.com/kvrouter/kvrouter/bench/replay"
	"github.com/kvrouter/kvrouter/bench/trace"
)

// ttftWindow is how many recent requests a side's TTFT percentiles cover.
const ttftWindow = 2000

// side is one half of the demo's comparison: a fleet and the simulated
// times to first token of its most recent requests.
type side struct {
	name  string
	fleet *harness.Fleet

	mu   sync.Mutex
	ttft []time.Duration // ring of the last ttftWindow
	next int
}

func (s *side) addTTFT(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ttft) < ttftWindow {
		s.ttft = append(s.ttft, d)
		return
	}
	s.ttft[s.next] = d
	s.next = (s.next + 1) % ttftWindow
}

// sideStats is what the comparison line shows of one side.
type sideStats struct {
	Name string
	// Requests served since the start.
	Requests uint64
	// HitRate is the share of prompt blocks found in the chosen engine's
	// cache since the start.
	HitRate float64
	// P50 and P99 of the recent requests' TTFT; N is how many there were.
	P50, P99 time.Duration
	N        int
}

func (s *side) stats() sideStats {
	tot := s.fleet.Totals()
	st := sideStats{Name: s.name, Requests: tot.Requests}
	if tot.PromptBlocks > 0 {
		st.HitRate = float64(tot.CachedBlocks) / float64(tot.PromptBlocks)
	}
	s.mu.Lock()
	ttft := append([]time.Duration(nil), s.ttft...)
	s.mu.Unlock()
	st.P50, st.P99, st.N = percentile(ttft, 0.50), percentile(ttft, 0.99), len(ttft)
	return st
}

// percentile is the nearest-rank percentile of d (0 when empty); it sorts d.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	i := int(p*float64(len(d))+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

// comparisonHeader explains the columns of comparisonLine once.
func comparisonHeader(every time.Duration) string {
	return fmt.Sprintf(`Every %v: the same trace through kvrouter and through round-robin, each on its own identical
simulated fleet. "cache hits" is the share of prompt blocks the chosen engine already held, since
the start; TTFT is the simulated time to first token of the last %d requests (p50 / p99).
`, every, ttftWindow)
}

// comparisonLine is one readable line comparing the two sides.
func comparisonLine(kv, rr sideStats) string {
	half := func(s sideStats) string {
		if s.N == 0 {
			return fmt.Sprintf("%s: %4.1f%% cache hits, TTFT not yet measured", s.Name, 100*s.HitRate)
		}
		return fmt.Sprintf("%s: %4.1f%% cache hits, TTFT %s / %s", s.Name, 100*s.HitRate, seconds(s.P50), seconds(s.P99))
	}
	line := half(kv) + "  |  " + half(rr)
	if kv.N > 0 && rr.N > 0 && rr.P50 > 0 && rr.P99 > 0 {
		line += fmt.Sprintf("  |  kvrouter's TTFT %.2fx / %.2fx round-robin's", float64(kv.P50)/float64(rr.P50), float64(kv.P99)/float64(rr.P99))
	}
	return line + fmt.Sprintf("  (%d / %d requests)", kv.Requests, rr.Requests)
}

// seconds prints d with two significant decimals in seconds, or in
// milliseconds below one second.
func seconds(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// playLoop replays reqs through choose on s's fleet, pass after pass,
// until ctx ends; routed requests are marked on marks.
func playLoop(ctx context.Context, s *side, reqs []trace.Request, clock replay.Clock, choose replay.ChooseFunc,
	marks kvrouterv1.RouterClient, check func() error, log *slog.Logger) error {
	span := reqs[len(reqs)-1].Arrival + time.Second
	for pass := 0; ; pass++ {
		pr, err := replay.Play(ctx, replay.PlayConfig{
			Fleet: s.fleet, Requests: reqs, Clock: clock, Offset: time.Duration(pass) * span,
			Choose: choose, Router: marks, IDPrefix: fmt.Sprintf("demo-%s-%d-", s.name, pass),
			OnTTFT: s.addTTFT,
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if pr.FirstError != "" {
			log.Warn("pass had errors", "fleet", s.name, "pass", pass, "choose_errors", pr.ChooseErrors, "mark_errors", pr.MarkErrors, "first", pr.FirstError)
		}
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
	}
}

// startRoundRobin starts the baseline: an identical fleet no router
// follows, the same trace on the same clock, engines chosen round-robin.
// The returned function closes its fleet.
func startRoundRobin(ctx context.Context, wg *sync.WaitGroup, fleetCfg harness.FleetConfig, reqs []trace.Request, clock replay.Clock, engines int, log *slog.Logger) (*side, func(), error) {
	rrFleet, err := harness.StartFleet(fleetCfg)
	if err != nil {
		return nil, nil, err
	}
	rr := &side{name: "round-robin", fleet: rrFleet}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := playLoop(ctx, rr, reqs, clock, replay.RoundRobin(engines), nil, nil, log); err != nil {
			log.Error("round-robin replay stopped", "err", err)
		}
	}()
	return rr, rrFleet.Close, nil
}

// printComparisons prints the comparison line (and, with replicas, the
// gateway's counters) every interval until ctx ends.
func printComparisons(ctx context.Context, out io.Writer, every time.Duration, kv, rr *side, be *backend, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if rr != nil {
			fmt.Fprintln(out, comparisonLine(kv.stats(), rr.stats()))
		} else {
			fmt.Fprintln(out, comparisonLine(kv.stats(), sideStats{Name: "round-robin (off)"}))
		}
		if be.gw != nil {
			g := be.gw.Stats()
			log.Info("gateway", "routes_per_replica", fmt.Sprint(g.RoutesPerReplica), "marks", g.Marks,
				"marks_not_found", g.MarksNotFound, "retries", g.RouteRetries+g.MarkRetries)
		}
	}
}
