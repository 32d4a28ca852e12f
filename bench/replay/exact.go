package replay

import (
	"github.com/kvrouter/kvrouter/bench/harness"

	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
)

// Truth is what a quiescent fleet holds, the reference of an exactness check:
// every engine's cache size, and for each sample prompt how many of its
// leading blocks every engine holds (engines know their caches exactly).
type Truth struct {
	// Cached is each engine's cache size in blocks.
	Cached []int
	// Prompts are the sample prompts; From[p] is the engine that served prompt p.
	Prompts [][]uint32
	From    []int
	// Matched[p][e] is how many leading blocks of prompt p engine e holds.
	Matched [][]int
}

// TakeTruth reads the engines' caches for the prompts. No engine may serve a
// request meanwhile.
func TakeTruth(f *harness.Fleet, prompts [][]uint32, from []int) *Truth {
	t := &Truth{Cached: make([]int, len(f.Engines)), Prompts: prompts, From: from, Matched: make([][]int, len(prompts))}
	for p := range prompts {
		t.Matched[p] = make([]int, len(f.Engines))
	}
	var wg sync.WaitGroup
	for i, e := range f.Engines { // one engine per goroutine: each hashes with its own seed
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Cached[i] = e.Stats().CachedNow
			var h []uint64
			for p, toks := range prompts {
				h = e.BlockHashes(toks, h[:0])
				t.Matched[p][i] = e.Overlap(h)
			}
		}()
	}
	wg.Wait()
	return t
}

// RankCheck is one worker/rank's comparison with the truth.
type RankCheck struct {
	Worker string
	// Listed: ListWorkers reports the rank; Status is its entry.
	Listed bool
	Status *kvrouterv1.WorkerStatus
	// Restore is the rank's restore outcome (WorkerStatus.restore).
	Restore string
	// RouterBlocks is ListWorkers' cached_blocks, EngineBlocks the engine's cache size.
	RouterBlocks uint64
	EngineBlocks int
	// Scored: the Score pass ran. Over and Under count sample prompts whose
	// matched_blocks for this rank is above or below what the engine holds.
	Scored      bool
	Prompts     int
	Over, Under int
	FirstDiff   string
}

// CountsAgree reports whether the router's block count is the engine's.
func (r *RankCheck) CountsAgree() bool { return r.Listed && r.RouterBlocks == uint64(r.EngineBlocks) }

// Exact reports whether the rank matched the truth in every check.
func (r *RankCheck) Exact() bool {
	return r.CountsAgree() && r.Scored && r.Over == 0 && r.Under == 0
}

// Overstates reports whether the router claims blocks the engine does not hold.
func (r *RankCheck) Overstates() bool {
	return r.Listed && (r.RouterBlocks > uint64(r.EngineBlocks) || r.Over > 0)
}

// Reason says why the rank is not exact ("" when it is).
func (r *RankCheck) Reason() string {
	if !r.Listed {
		return "not in ListWorkers"
	}
	var why []string
	if !r.CountsAgree() {
		why = append(why, fmt.Sprintf("router holds %d blocks, engine %d", r.RouterBlocks, r.EngineBlocks))
	}
	switch {
	case !r.Scored:
		why = append(why, "Score not checked")
	case r.Over > 0 || r.Under > 0:
		why = append(why, fmt.Sprintf("Score differs on %d of %d prompts (%d above, %d below the truth; first %s)",
			r.Over+r.Under, r.Prompts, r.Over, r.Under, r.FirstDiff))
	}
	return strings.Join(why, "; ")
}

// ExactCheck is one comparison of the router with a fleet's truth.
type ExactCheck struct {
	// At is when the check started.
	At time.Time
	// Ranks are in fleet order (one rank per engine).
	Ranks []RankCheck
	// Registry lists what ListWorkers gets wrong about the registered
	// workers (missing, changed or extra); empty when the registry is whole.
	Registry []string
	// ScoreErr is the first failed Score call, if any.
	ScoreErr string
	// Prompts is the number of sample prompts (scored or not).
	Prompts int
}

// CheckConfig configures CheckExact.
type CheckConfig struct {
	Fleet    *harness.Fleet
	Registry kvrouterv1.RegistryClient
	Router   kvrouterv1.RouterClient
	Model    string
	Truth    *Truth
	// ScoreIf, if set, decides after ListWorkers whether to run the Score
	// pass (e.g. only once the counts agree); nil always runs it.
	ScoreIf func(ranks []RankCheck) bool
	// Concurrency bounds the Score calls in flight (default 4).
	Concurrency int
}

// CheckExact compares ListWorkers (registry and per-rank block counts) and
// Score on every sample prompt with the truth. Only failing to reach the
// router for ListWorkers is an error; what the router gets wrong is in the
// result.
func CheckExact(ctx context.Context, cfg CheckConfig) (*ExactCheck, error) {
	c := &ExactCheck{At: time.Now(), Ranks: make([]RankCheck, len(cfg.Fleet.Engines)), Prompts: len(cfg.Truth.Prompts)}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := cfg.Registry.ListWorkers(lctx, &kvrouterv1.ListWorkersRequest{Model: cfg.Model})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	seen := make(map[string]bool)
	for _, ws := range resp.Workers {
		id := ws.GetWorker().GetWorkerId()
		i, ok := cfg.Fleet.Index(id)
		if !ok || ws.DpRank != 0 {
			c.Registry = append(c.Registry, fmt.Sprintf("unexpected worker %s rank %d", id, ws.DpRank))
			continue
		}
		seen[id] = true
		r := &c.Ranks[i]
		r.Listed, r.Status, r.RouterBlocks = true, ws, ws.CachedBlocks
		r.Restore = ws.GetRestore()
		if d := workerDiff(cfg.Fleet, i, cfg.Model, ws.GetWorker()); d != "" {
			c.Registry = append(c.Registry, id+": "+d)
		}
	}
	for i, e := range cfg.Fleet.Engines {
		c.Ranks[i].Worker = e.ID()
		c.Ranks[i].EngineBlocks = cfg.Truth.Cached[i]
		if !seen[e.ID()] {
			c.Registry = append(c.Registry, e.ID()+": missing")
		}
	}
	sort.Strings(c.Registry)
	if cfg.ScoreIf != nil && !cfg.ScoreIf(c.Ranks) {
		return c, nil
	}
	if err := c.score(ctx, cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// workerDiff says how a listed worker differs from what Fleet.Register sent.
func workerDiff(f *harness.Fleet, i int, model string, w *kvrouterv1.Worker) string {
	e := f.Engines[i]
	var d []string
	check := func(field, got, want string) {
		if got != want {
			d = append(d, fmt.Sprintf("%s %q, registered %q", field, got, want))
		}
	}
	check("model", w.GetModel(), model)
	check("kv_events_endpoint", w.GetKvEventsEndpoint(), e.Endpoint())
	check("replay_endpoint", w.GetReplayEndpoint(), e.ReplayEndpoint())
	if n := w.GetDpSize(); n > 1 {
		d = append(d, fmt.Sprintf("dp_size %d, registered 1", n))
	}
	return strings.Join(d, ", ")
}

// score runs Score on every sample prompt and compares each rank's
// matched_blocks with the truth.
func (c *ExactCheck) score(ctx context.Context, cfg CheckConfig) error {
	t := cfg.Truth
	conc := cfg.Concurrency
	if conc <= 0 {
		conc = 4
	}
	got := make([]map[string]uint32, len(t.Prompts))
	errs := make([]error, len(t.Prompts))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := cfg.Router.Score(sctx, &kvrouterv1.ScoreRequest{Prompt: &kvrouterv1.Prompt{Model: cfg.Model, TokenIds: t.Prompts[p]}})
				cancel()
				if err != nil {
					errs[p] = err
					continue
				}
				m := make(map[string]uint32, len(resp.Scores))
				for _, s := range resp.Scores {
					if s.DpRank == 0 {
						m[s.WorkerId] = s.MatchedBlocks
					}
				}
				got[p] = m
			}
		}()
	}
	for p := range t.Prompts {
		next <- p
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range c.Ranks {
		c.Ranks[i].Scored, c.Ranks[i].Prompts = true, len(t.Prompts)
	}
	for p := range t.Prompts {
		if errs[p] != nil {
			if c.ScoreErr == "" {
				c.ScoreErr = errs[p].Error()
			}
			for i := range c.Ranks {
				c.Ranks[i].Scored = false
			}
			continue
		}
		for i := range c.Ranks {
			r := &c.Ranks[i]
			m, ok := got[p][r.Worker]
			want := t.Matched[p][i]
			if ok && int(m) == want {
				continue
			}
			if ok && int(m) > want {
				r.Over++
			} else {
				r.Under++
			}
			if r.FirstDiff == "" {
				if !ok {
					r.FirstDiff = fmt.Sprintf("a prompt of %s: rank absent from Score, engine holds %d blocks", cfg.Fleet.Engines[t.From[p]].ID(), want)
				} else {
					r.FirstDiff = fmt.Sprintf("a prompt of %s: router %d blocks, engine %d", cfg.Fleet.Engines[t.From[p]].ID(), m, want)
				}
			}
		}
	}
	return nil
}
