package scoring

import (
	"math/rand/v2"
	"sync"

	"github.com/kvrouter/kvrouter/internal/kv"
)

// Router scores prompts against the index and the prediction overlay and
// chooses workers under load. It is safe for concurrent use.
type Router struct {
	cfg     Config
	weights [kv.NumTiers]float64

	mu      sync.RWMutex
	workers map[string]*worker
	models  map[string][]*rank // model -> ranks, in registration order
	ranks   map[kv.WorkerRank]*rank
	states  map[string]*model // model -> its state (model.go)

	load *loadTable

	// bySlot caches index slot -> rank (radix.Score.Slot) so a match result
	// finds its rank without a map lookup. Guarded by mu; filled lazily.
	bySlot []*rank

	pool sync.Pool // *scratch

	rngMu sync.Mutex
	rng   *rand.Rand

	// hashed, when set (by tests), is called right after a prompt is hashed.
	hashed func()
}

// New returns a Router for cfg.
func New(cfg Config) (*Router, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	r := &Router{
		cfg:     cfg,
		weights: *cfg.TierWeights,
		workers: make(map[string]*worker),
		models:  make(map[string][]*rank),
		ranks:   make(map[kv.WorkerRank]*rank),
		states:  make(map[string]*model),
		load:    newLoadTable(cfg.MaxActiveRequests, cfg.RequestTTL, cfg.PrefillTokensPerSecond),
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
	r.pool.New = func() any { return new(scratch) }
	return r, nil
}
