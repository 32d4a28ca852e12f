package scoring

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/kv"
	"github.com/kvrouter/kvrouter/internal/normalize"
	"github.com/kvrouter/kvrouter/internal/radix"
)

// Error classes returned (wrapped, with the field or reason) by the Router.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrNotFound        = errors.New("not found")
	ErrUnavailable     = errors.New("unavailable")
	ErrAlreadyExists   = errors.New("already exists")
)

// Config configures a Router. Zero values take the defaults named on each field.
type Config struct {
	// Index is the index of engine-reported blocks. Required.
	Index *radix.Index
	// BlockSize is the router block size in tokens (16).
	BlockSize int
	// MaxPromptTokens bounds a prompt (262,144); block_hashes prompts are bounded
	// by MaxPromptTokens/BlockSize blocks.
	MaxPromptTokens int
	// PrefillWeight multiplies prefill blocks in the cost (2.0: on the
	// Mooncake trace in bench/ it beat 1.0 on hit rate and TTFT at every
	// cache size measured, with the same balance).
	PrefillWeight float64
	// TierWeights is the overlap credit of a matched block by its best tier
	// (device 1.0, host 0.75, disk 0.25, external 0). Set DefaultTierWeights to keep them.
	TierWeights *[kv.NumTiers]float64
	// MaxActivePrefillTokens excludes a candidate whose active prefill tokens
	// reach it (0: off).
	MaxActivePrefillTokens int64
	// MaxActiveDecodeBlocks excludes a candidate whose active decode blocks reach
	// it (0: off).
	MaxActiveDecodeBlocks int64
	// RequestTTL expires routed requests never finished (5 minutes).
	RequestTTL time.Duration
	// DisablePrediction turns off the predicted-blocks overlay for workers with events.
	DisablePrediction bool
	// PredictionTTL bounds a predicted block's life (2 minutes).
	PredictionTTL time.Duration
	// PredictionCapacity bounds predicted blocks per rank of a worker with events (8,192).
	PredictionCapacity int
	// PredictionMaxBlocks bounds the blocks one Route predicts, past the
	// chosen rank's matched prefix (64, i.e. 1,024 tokens at block size 16).
	PredictionMaxBlocks int
	// ApproxCapacity bounds predicted blocks per rank of a worker without events,
	// which is routed from predictions alone (16,384, LRU-evicted).
	ApproxCapacity int
	// ApproxTTL bounds a predicted block's life on a worker without events (1 hour).
	ApproxTTL time.Duration
	// Now is the clock (time.Now); tests set it.
	Now func() time.Time
	// Seed seeds the tie-break and sampling randomness (0: random).
	Seed uint64
}

// DefaultTierWeights is the overlap credit per tier: device, host, disk, external.
var DefaultTierWeights = [kv.NumTiers]float64{1.0, 0.75, 0.25, 0.0}

// Worker is a registered worker as scoring sees it.
type Worker struct {
	ID       string
	Model    string
	Endpoint string
	// DPSize is the number of data-parallel ranks (0 means 1).
	DPSize int
	// Approximate marks a worker without KV events: it is routed from the
	// router's own predictions alone.
	Approximate bool
}

// Prompt is a request's prompt: exactly one of Tokens or BlockHashes is set.
type Prompt struct {
	Model       string
	Tokens      []uint32
	BlockHashes []uint64
	LoRAName    string
	CacheSalt   string
	MM          []MMItem
}

// MMItem is a prompt-side multimodal item as the client sends it.
type MMItem struct {
	Hash   string
	Offset uint32
	Length uint32
}

// WorkerScore is one worker/rank's overlap with a prompt.
type WorkerScore struct {
	WorkerID  string
	DPRank    uint32
	Endpoint  string
	Matched   uint32
	ByTier    [kv.NumTiers]uint32
	Predicted uint32
	Cached    uint64
}

// ScoreResult answers Score.
type ScoreResult struct {
	BlockSize    uint32
	PromptBlocks uint32
	// Scores has every worker/rank of the model, by Matched descending.
	Scores []WorkerScore
}

// Candidate is one candidate's cost terms.
type Candidate struct {
	WorkerID      string
	DPRank        uint32
	Matched       uint32
	PrefillBlocks float64
	DecodeBlocks  float64
	Cost          float64
}

// Decision answers Route.
type Decision struct {
	WorkerID     string
	DPRank       uint32
	Endpoint     string
	Matched      uint32
	PromptBlocks uint32
	Cost         float64
	Candidates   []Candidate
}

// Router scores prompts against the index and the prediction overlay and
// chooses workers under load. It is safe for concurrent use.
type Router struct {
	cfg     Config
	weights [kv.NumTiers]float64

	mu      sync.RWMutex
	workers map[string]*worker
	models  map[string][]*rank // model -> ranks, in registration order
	ranks   map[kv.WorkerRank]*rank

	overlay *overlay
	load    *loadTable

	// bySlot caches index slot -> rank (radix.Score.Slot) so a match result
	// finds its rank without a map lookup. Guarded by mu; filled lazily.
	bySlot []*rank

	pool sync.Pool // *scratch

	rngMu sync.Mutex
	rng   *rand.Rand
}

type worker struct {
	Worker
	ranks []*rank
}

type rank struct {
	key         kv.WorkerRank
	worker      *worker
	slot        int32 // overlay slot
	idx         int   // position in its model's rank list; guarded by Router.mu
	approximate bool

	// Guarded by loadTable.mu.
	prefillBlocks int64
	prefillTokens int64
	decodeBlocks  int64
	active        int64
}

// New returns a Router for cfg.
func New(cfg Config) (*Router, error) {
	if cfg.Index == nil {
		return nil, errors.New("scoring: Config.Index is required")
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.MaxPromptTokens <= 0 {
		cfg.MaxPromptTokens = 262144
	}
	if cfg.PrefillWeight == 0 {
		cfg.PrefillWeight = 2.0
	}
	if cfg.PrefillWeight < 0 {
		return nil, fmt.Errorf("scoring: prefill weight %v is negative", cfg.PrefillWeight)
	}
	if cfg.RequestTTL <= 0 {
		cfg.RequestTTL = 5 * time.Minute
	}
	if cfg.PredictionTTL <= 0 {
		cfg.PredictionTTL = 2 * time.Minute
	}
	if cfg.PredictionMaxBlocks <= 0 {
		cfg.PredictionMaxBlocks = 64
	}
	if cfg.PredictionCapacity <= 0 {
		cfg.PredictionCapacity = 8192
	}
	if cfg.ApproxCapacity <= 0 {
		cfg.ApproxCapacity = 16384
	}
	if cfg.ApproxTTL <= 0 {
		cfg.ApproxTTL = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	w := DefaultTierWeights
	if cfg.TierWeights != nil {
		w = *cfg.TierWeights
	}
	for i, v := range w {
		if v < 0 || v > 1 || math.IsNaN(v) {
			return nil, fmt.Errorf("scoring: tier weight %d is %v, want 0..1", i, v)
		}
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	r := &Router{
		cfg:     cfg,
		weights: w,
		workers: make(map[string]*worker),
		models:  make(map[string][]*rank),
		ranks:   make(map[kv.WorkerRank]*rank),
		overlay: newOverlay(),
		load:    newLoadTable(),
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
	r.pool.New = func() any { return new(scratch) }
	return r, nil
}

// AddWorker makes w a candidate for its model.
func (r *Router) AddWorker(w Worker) error {
	if w.ID == "" {
		return fmt.Errorf("%w: worker_id is empty", ErrInvalidArgument)
	}
	if w.Model == "" {
		return fmt.Errorf("%w: model is empty", ErrInvalidArgument)
	}
	if w.DPSize <= 0 {
		w.DPSize = 1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.workers[w.ID]; ok {
		return fmt.Errorf("%w: worker_id %q is already registered", ErrAlreadyExists, w.ID)
	}
	wk := &worker{Worker: w}
	for i := 0; i < w.DPSize; i++ {
		capacity, ttl := r.cfg.PredictionCapacity, r.cfg.PredictionTTL
		if w.Approximate {
			capacity, ttl = r.cfg.ApproxCapacity, r.cfg.ApproxTTL
		}
		rk := &rank{
			key:         kv.WorkerRank{ID: w.ID, DPRank: uint32(i)},
			worker:      wk,
			approximate: w.Approximate,
		}
		r.overlay.addRank(rk, capacity, ttl)
		wk.ranks = append(wk.ranks, rk)
		r.ranks[rk.key] = rk
		rk.idx = len(r.models[w.Model])
		// Copy on write: readers may hold the old slice.
		r.models[w.Model] = append(slices.Clip(r.models[w.Model]), rk)
	}
	r.workers[w.ID] = wk
	return nil
}

// RemoveWorker drops a worker, its predictions and its active requests.
func (r *Router) RemoveWorker(id string) {
	r.mu.Lock()
	wk, ok := r.workers[id]
	if !ok {
		r.mu.Unlock()
		return
	}
	delete(r.workers, id)
	ms := r.models[wk.Model]
	ms = slices.DeleteFunc(slices.Clone(ms), func(rk *rank) bool { return rk.worker == wk })
	if len(ms) == 0 {
		delete(r.models, wk.Model)
	} else {
		r.models[wk.Model] = ms
		for j, rk := range ms {
			rk.idx = j
		}
	}
	for _, rk := range wk.ranks {
		delete(r.ranks, rk.key)
	}
	for i, rk := range r.bySlot {
		if rk != nil && rk.worker == wk {
			r.bySlot[i] = nil
		}
	}
	r.mu.Unlock()
	for _, rk := range wk.ranks {
		r.overlay.removeRank(rk.slot)
	}
	r.load.dropWorker(wk)
}

// scratch is per-call working memory, pooled so the hot path allocates little.
type scratch struct {
	hashes  []uint64
	chain   []uint64
	mmItems []normalize.MMItem
	matches []radix.Score
	depth   []uint32 // per model rank: union depth
	radixM  []uint32 // per model rank: radix matched
	byTier  [][kv.NumTiers]uint32
	cached  []uint64
	costs   []float64
	prefill []float64
	decode  []float64
	cands   []int
	top     []int
	missed  []slotRank
}

type slotRank struct {
	slot uint32
	rank *rank
}

// learnSlots records slot -> rank pairs that evaluate missed.
func (r *Router) learnSlots(missed []slotRank) {
	if len(missed) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range missed {
		if r.ranks[m.rank.key] != m.rank {
			continue // removed meanwhile
		}
		if int(m.slot) >= len(r.bySlot) {
			r.bySlot = append(r.bySlot, make([]*rank, int(m.slot)+1-len(r.bySlot))...)
		}
		r.bySlot[m.slot] = m.rank
	}
}

// hashPrompt validates p and returns its router block hashes in s.hashes.
func (r *Router) hashPrompt(p *Prompt, s *scratch) error {
	hasTokens, hasHashes := len(p.Tokens) > 0, len(p.BlockHashes) > 0
	switch {
	case hasTokens && hasHashes:
		return fmt.Errorf("%w: prompt sets both token_ids and block_hashes; set exactly one", ErrInvalidArgument)
	case !hasTokens && !hasHashes:
		return fmt.Errorf("%w: prompt is empty: set token_ids or block_hashes", ErrInvalidArgument)
	}
	if p.Model == "" {
		return fmt.Errorf("%w: prompt.model is empty", ErrInvalidArgument)
	}
	if hasHashes {
		if len(p.MM) > 0 {
			return fmt.Errorf("%w: prompt.mm_items apply to token_ids only; with block_hashes mix them into the hashes", ErrInvalidArgument)
		}
		if max := r.cfg.MaxPromptTokens / r.cfg.BlockSize; len(p.BlockHashes) > max {
			return fmt.Errorf("%w: prompt.block_hashes has %d blocks, over the limit of %d (--max-prompt-tokens / --block-size)", ErrInvalidArgument, len(p.BlockHashes), max)
		}
		s.hashes = append(s.hashes[:0], p.BlockHashes...)
		return nil
	}
	if len(p.Tokens) > r.cfg.MaxPromptTokens {
		return fmt.Errorf("%w: prompt.token_ids has %d tokens, over --max-prompt-tokens %d", ErrInvalidArgument, len(p.Tokens), r.cfg.MaxPromptTokens)
	}
	s.mmItems = s.mmItems[:0]
	for i, it := range p.MM {
		if it.Hash == "" {
			return fmt.Errorf("%w: prompt.mm_items[%d].hash is empty", ErrInvalidArgument, i)
		}
		if it.Length == 0 {
			return fmt.Errorf("%w: prompt.mm_items[%d].length is 0", ErrInvalidArgument, i)
		}
		if uint64(it.Offset)+uint64(it.Length) > uint64(len(p.Tokens)) {
			return fmt.Errorf("%w: prompt.mm_items[%d] covers tokens [%d, %d), past the prompt's %d tokens", ErrInvalidArgument, i, it.Offset, uint64(it.Offset)+uint64(it.Length), len(p.Tokens))
		}
		s.mmItems = append(s.mmItems, normalize.MMItem{Hash: normalize.MMHash(it.Hash), Offset: it.Offset, Length: it.Length})
	}
	seed := normalize.Seed(p.LoRAName, p.CacheSalt)
	s.hashes = normalize.HashPrompt(seed, p.Tokens, r.cfg.BlockSize, s.mmItems, s.hashes[:0])
	return nil
}

// evaluate hashes and matches p against the index and the overlay. It fills
// s.radixM, s.depth and s.byTier (and, with withCached, s.cached) per rank of
// the model's rank list, which it returns. The caller holds r.mu for reading.
func (r *Router) evaluate(p *Prompt, s *scratch, withCached bool) ([]*rank, error) {
	if err := r.hashPrompt(p, s); err != nil {
		return nil, err
	}
	ranks := r.models[p.Model]
	if len(ranks) == 0 {
		return nil, fmt.Errorf("%w: no registered worker serves model %q", ErrNotFound, p.Model)
	}
	n := len(ranks)
	s.radixM = resize(s.radixM, n)
	s.depth = resize(s.depth, n)
	s.cached = resize(s.cached, n)
	s.byTier = resize(s.byTier, n)
	clear(s.radixM)
	clear(s.byTier)
	const unknown = ^uint64(0)
	if withCached {
		for j := range s.cached {
			s.cached[j] = unknown
		}
	}
	if len(s.hashes) > 0 {
		s.matches = r.cfg.Index.Match(s.hashes, s.matches[:0])
	} else {
		s.matches = s.matches[:0]
	}
	// Index positions of the model's ranks, found through the slot cache
	// (or, the first time a slot is seen, the rank table).
	s.missed = s.missed[:0]
	for i := range s.matches {
		m := &s.matches[i]
		var rk *rank
		if int(m.Slot) < len(r.bySlot) {
			rk = r.bySlot[m.Slot]
		}
		if rk == nil { // (RemoveWorker clears its ranks' slots; slots are never reused)
			w, ok := r.cfg.Index.WorkerOf(m.Slot)
			if !ok {
				continue
			}
			if rk, ok = r.ranks[w]; !ok {
				continue
			}
			s.missed = append(s.missed, slotRank{m.Slot, rk})
		}
		if rk.worker.Model != p.Model {
			continue
		}
		j := rk.idx
		s.radixM[j] = m.Matched
		s.byTier[j] = m.ByTier
		s.cached[j] = m.Cached
	}
	copy(s.depth, s.radixM)
	if withCached {
		// Match reported the index size of every rank it scored; ask only for the rest.
		for j, rk := range ranks {
			if s.cached[j] == unknown {
				s.cached[j] = r.cfg.Index.Cached(rk.key)
			}
		}
	}
	if len(s.hashes) > 0 {
		s.chain = radix.PrefixKeys(s.hashes, s.chain[:0])
		r.overlay.extend(s.chain, ranks, s.radixM, s.depth, r.cfg.Now(), r.cfg.DisablePrediction)
	}
	return ranks, nil
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Score reports every worker/rank of the prompt's model with its overlap.
func (r *Router) Score(p *Prompt) (*ScoreResult, error) {
	s := r.pool.Get().(*scratch)
	defer r.pool.Put(s)
	r.mu.RLock()
	ranks, err := r.evaluate(p, s, true)
	if err != nil {
		r.mu.RUnlock()
		return nil, err
	}
	res := &ScoreResult{
		BlockSize:    uint32(r.cfg.BlockSize),
		PromptBlocks: uint32(len(s.hashes)),
		Scores:       make([]WorkerScore, len(ranks)),
	}
	for j, rk := range ranks {
		ws := WorkerScore{
			WorkerID:  rk.key.ID,
			DPRank:    rk.key.DPRank,
			Endpoint:  rk.worker.Endpoint,
			Matched:   s.depth[j],
			ByTier:    s.byTier[j],
			Predicted: s.depth[j] - s.radixM[j],
			Cached:    s.cached[j],
		}
		ws.ByTier[kv.TierDevice] += ws.Predicted
		res.Scores[j] = ws
	}
	r.mu.RUnlock()
	r.learnSlots(s.missed)
	slices.SortStableFunc(res.Scores, func(a, b WorkerScore) int { return cmp.Compare(b.Matched, a.Matched) })
	return res, nil
}

// Route chooses a worker for p. With requestID set, the request counts as
// active load on the chosen worker until Finished (or RequestTTL). temperature
// 0 picks the minimum cost; above 0 samples a softmax over normalized costs.
// maxCandidates > 0 keeps only that many cheapest candidates in the Decision
// (the chosen one always among them).
func (r *Router) Route(p *Prompt, requestID string, temperature float64, maxCandidates int) (*Decision, error) {
	if temperature < 0 || math.IsNaN(temperature) || math.IsInf(temperature, 0) {
		return nil, fmt.Errorf("%w: temperature %v must be a finite number >= 0", ErrInvalidArgument, temperature)
	}
	now := r.cfg.Now()
	r.load.expire(now)
	s := r.pool.Get().(*scratch)
	defer r.pool.Put(s)
	r.mu.RLock()
	ranks, err := r.evaluate(p, s, false)
	if err != nil {
		r.mu.RUnlock()
		return nil, err
	}
	promptBlocks := float64(len(s.hashes))
	s.cands = s.cands[:0]
	s.costs = s.costs[:0]
	s.prefill = s.prefill[:0]
	s.decode = s.decode[:0]
	r.load.mu.Lock()
	for j, rk := range ranks {
		if r.cfg.MaxActivePrefillTokens > 0 && rk.prefillTokens >= r.cfg.MaxActivePrefillTokens {
			continue
		}
		if r.cfg.MaxActiveDecodeBlocks > 0 && rk.decodeBlocks >= r.cfg.MaxActiveDecodeBlocks {
			continue
		}
		credit := 0.0
		for t, n := range s.byTier[j] {
			credit += r.weights[t] * float64(n)
		}
		credit += r.weights[kv.TierDevice] * float64(s.depth[j]-s.radixM[j]) // predicted blocks count as device blocks
		prefill := promptBlocks - credit + float64(rk.prefillBlocks)
		decode := float64(rk.decodeBlocks)
		s.cands = append(s.cands, j)
		s.costs = append(s.costs, r.cfg.PrefillWeight*prefill+decode)
		s.prefill = append(s.prefill, prefill)
		s.decode = append(s.decode, decode)
	}
	r.load.mu.Unlock()
	if len(s.cands) == 0 {
		r.mu.RUnlock()
		return nil, fmt.Errorf("%w: every worker of model %q is over its busy thresholds", ErrUnavailable, p.Model)
	}
	pick := r.choose(s.costs, temperature)
	j := s.cands[pick]
	chosen := ranks[j]
	matched := s.depth[j]
	dec := &Decision{
		WorkerID: chosen.key.ID, DPRank: chosen.key.DPRank, Endpoint: chosen.worker.Endpoint,
		Matched: matched, PromptBlocks: uint32(len(s.hashes)), Cost: s.costs[pick],
	}
	candidate := func(i int) Candidate {
		rk := ranks[s.cands[i]]
		return Candidate{
			WorkerID: rk.key.ID, DPRank: rk.key.DPRank, Matched: s.depth[s.cands[i]],
			PrefillBlocks: s.prefill[i], DecodeBlocks: s.decode[i], Cost: s.costs[i],
		}
	}
	if maxCandidates <= 0 || maxCandidates >= len(s.cands) {
		dec.Candidates = make([]Candidate, len(s.cands))
		for i := range s.cands {
			dec.Candidates[i] = candidate(i)
		}
	} else {
		s.top = cheapest(s.costs, pick, maxCandidates, s.top[:0])
		dec.Candidates = make([]Candidate, len(s.top))
		for i, c := range s.top {
			dec.Candidates[i] = candidate(c)
		}
	}

	// Load and prediction go on while the read lock still keeps chosen
	// registered: a RemoveWorker in between would leave a request on a dead
	// rank and a prediction in an overlay slot that may have a new owner.
	uncached := uint32(len(s.hashes)) - matched
	if requestID != "" {
		uncachedTokens := int64(len(p.Tokens)) - int64(matched)*int64(r.cfg.BlockSize)
		if len(p.Tokens) == 0 {
			uncachedTokens = int64(uncached) * int64(r.cfg.BlockSize)
		}
		if err := r.load.add(requestID, chosen, int64(uncached), uncachedTokens, int64(len(s.hashes)), now.Add(r.cfg.RequestTTL)); err != nil {
			r.mu.RUnlock()
			return nil, err
		}
	}
	// Predictions cover at most PredictionMaxBlocks blocks past what the
	// rank's index holds: enough for a burst sharing a new prefix to land
	// together, without a long prompt's tail costing hundreds of overlay
	// updates on every Route.
	switch {
	case chosen.approximate && len(s.chain) > 0:
		// LRU: the prompt's blocks the rank already holds are refreshed too.
		r.overlay.predict(chosen, s.chain[:min(len(s.chain), r.cfg.PredictionMaxBlocks)], now)
	case uncached > 0 && !r.cfg.DisablePrediction && !chosen.approximate:
		end := min(len(s.chain), int(matched)+r.cfg.PredictionMaxBlocks)
		r.overlay.predict(chosen, s.chain[matched:end], now)
	}
	r.mu.RUnlock()
	r.learnSlots(s.missed)
	return dec, nil
}

// cheapest appends to out the indices of the n cheapest costs: pick first,
// then the others by ascending cost. It keeps a sorted window of n, which is
// cheap for the small n a gateway asks for.
func cheapest(costs []float64, pick, n int, out []int) []int {
	out = append(out, pick)
	if n <= 1 {
		return out
	}
	for i, c := range costs {
		if i == pick {
			continue
		}
		if len(out) == n && c >= costs[out[n-1]] {
			continue
		}
		if len(out) < n {
			out = append(out, i)
		} else {
			out[n-1] = i
		}
		for k := len(out) - 1; k > 1 && costs[out[k]] < costs[out[k-1]]; k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out
}

// choose picks an index into costs: the minimum (random among ties) at
// temperature 0, otherwise a softmax sample over costs normalized to [0, 1].
func (r *Router) choose(costs []float64, temperature float64) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range costs {
		lo, hi = min(lo, c), max(hi, c)
	}
	if temperature == 0 || hi == lo {
		ties := 0
		pick := 0
		for i, c := range costs {
			if c == lo {
				ties++
				if r.rng.IntN(ties) == 0 { // reservoir sample among ties
					pick = i
				}
			}
		}
		return pick
	}
	total := 0.0
	for _, c := range costs {
		total += math.Exp(-((c - lo) / (hi - lo)) / temperature)
	}
	x := r.rng.Float64() * total
	for i, c := range costs {
		x -= math.Exp(-((c - lo) / (hi - lo)) / temperature)
		if x <= 0 {
			return i
		}
	}
	return len(costs) - 1
}

// MarkPrefillDone moves a request's load from prefill to decode.
func (r *Router) MarkPrefillDone(requestID string) error {
	return r.load.prefillDone(requestID)
}

// MarkFinished ends a request's load.
func (r *Router) MarkFinished(requestID string) error {
	return r.load.finish(requestID)
}

// Load is one worker/rank's active load.
type Load struct {
	WorkerID      string
	DPRank        uint32
	Active        int64
	PrefillBlocks int64
	PrefillTokens int64
	DecodeBlocks  int64
}

// Loads reports the active load of every registered worker/rank.
func (r *Router) Loads() []Load {
	r.load.expire(r.cfg.Now())
	r.mu.RLock()
	defer r.mu.RUnlock()
	r.load.mu.Lock()
	defer r.load.mu.Unlock()
	out := make([]Load, 0, len(r.ranks))
	for _, rk := range r.ranks {
		out = append(out, Load{WorkerID: rk.key.ID, DPRank: rk.key.DPRank, Active: rk.active,
			PrefillBlocks: rk.prefillBlocks, PrefillTokens: rk.prefillTokens, DecodeBlocks: rk.decodeBlocks})
	}
	return out
}
