package scoring

import (
	"math"
	"time"
)

// The time policy's learner. Everything here is guarded by its model's
// lock (model.mu).
//
// A prefill sample is one MarkPrefillDone: the request's uncached tokens, the
// time the rank spent on it, and the rank's active decode blocks when it was
// routed. The time spent is the busy interval max(routed, previous
// MarkPrefillDone on the rank) .. now: for an engine that prefills one
// request at a time in arrival order it is exactly the request's service
// time; for one that batches prefills, requests finishing together share one
// interval, and the ratio of token and time sums below is still the rank's
// throughput while busy.

// Smoothing windows, in samples. They set how fast the estimates follow a
// change (a slower GPU, a new model) against how much noise they average
// away (relative error about 1/sqrt(samples)); they are not fitted to a
// trace.
const (
	// rankHalfLife is a rank's half-life in its fair share of the model's
	// samples (rankHalfLife x ranks samples of the fleet), so a rank that
	// gets no samples, e.g. because an outlier made it look slow and the
	// router avoids it, drifts back to the fleet's estimate instead of
	// keeping the outlier forever.
	rankHalfLife  = 32
	fleetHalfLife = 256 // samples of all the model's ranks, and Routes for the reuse and queue averages
	// priorSamples is how many samples of the model's fleet a rank's own
	// estimate is shrunk toward (a new rank starts at the fleet's value).
	priorSamples = 4
	// outlierFactor bounds one sample's seconds per token, as a multiple of
	// the rank's estimate before it.
	outlierFactor = 4
)

var fleetKeep = math.Exp2(-1.0 / fleetHalfLife)

// timeStats is a decayed, token-weighted regression of seconds per prefill
// token (y) on the rank's active decode blocks (x).
type timeStats struct {
	n   float64 // samples
	w   float64 // tokens
	wx  float64 // tokens x decode blocks
	wy  float64 // busy seconds
	wxx float64 // tokens x decode blocks^2
	wxy float64 // decode blocks x busy seconds
	wyy float64 // busy seconds^2 / tokens
}

// scale weighs every sample so far by k.
func (s *timeStats) scale(k float64) {
	s.n, s.w, s.wx, s.wy, s.wxx, s.wxy, s.wyy = k*s.n, k*s.w, k*s.wx, k*s.wy, k*s.wxx, k*s.wxy, k*s.wyy
}

func (s *timeStats) add(keep, tokens, busy, x float64) {
	s.n = keep*s.n + 1
	s.w = keep*s.w + tokens
	s.wx = keep*s.wx + tokens*x
	s.wy = keep*s.wy + busy
	s.wxx = keep*s.wxx + tokens*x*x
	s.wxy = keep*s.wxy + x*busy
	s.wyy = keep*s.wyy + busy*busy/tokens
}

// slope is the extra seconds per prefill token per active decode block, or
// 0 while the data do not show one: fewer than 8 samples, no spread in
// decode load, or a slope within two standard errors of zero (or below it).
func (s *timeStats) slope() float64 {
	if s.n < 8 || s.w <= 0 {
		return 0
	}
	sxx := s.wxx - s.wx*s.wx/s.w
	if sxx <= 0 {
		return 0
	}
	sxy := s.wxy - s.wx*s.wy/s.w
	syy := s.wyy - s.wy*s.wy/s.w
	b := sxy / sxx
	if b <= 0 {
		return 0
	}
	resid := max(0, syy-b*sxy)
	if se := math.Sqrt(resid / ((s.n - 2) * sxx)); b < 2*se {
		return 0
	}
	return b
}

// rankTiming is what the learner keeps per rank. pending and spt come first:
// a Route reads them for every rank (rank's layout).
type rankTiming struct {
	pending   int64   // requests routed to it and not yet prefill-done
	spt       sptMemo // its last seconds per token (timeCoster)
	seq       uint64  // the fleet's sample count when stats was last decayed
	stats     timeStats
	lastDone  time.Time // the rank's last MarkPrefillDone
	busySince time.Time // when its oldest pending prefill started, while pending > 0
}

// sptMemo is a rank's last secondsPerToken, with what it was computed from:
// the learner's generation (model.gen) and the rank's decode load.
// secondsPerToken is a pure function of the rank's and its fleet's learned
// state, which change only with a new generation, and of the decode load,
// so a remembered value is the one it would return, bit for bit. A Route
// costs every rank of its model, and the division and the decay lookup per
// rank were its largest part; while no sample arrives (Routes without
// MarkPrefillDone, or between marks) the ranks whose decode load did not
// change cost one comparison.
type sptMemo struct {
	gen    uint64 // 0: none
	decode float64
	value  float64
}

// fleetTiming is what the learner keeps per model.
type fleetTiming struct {
	stats    timeStats
	hits     float64 // decayed matched blocks of routed prompts
	stores   float64 // decayed uncached blocks of routed prompts
	queue    float64 // decayed mean pending prefills per rank, seen by Routes
	capacity uint64  // largest index size seen on a rank of the model
	seq      uint64  // samples so far
	ranks    int     // the model's ranks at the last Route
	decay    *decayMemo
	balance  balanceState // the bounded-load guard's (balance.go)
	// rankRates: each rank's rate is its own, shrunk toward the model's
	// (Config.RankRates); otherwise every rank's is the model's.
	rankRates bool
}

// rankDecay is the weight left to a rank's samples after the fleet's
// samples since seq, the rank's last update.
func rankDecay(fleetSeq, seq uint64, ranks int) float64 {
	if fleetSeq <= seq {
		return 1
	}
	return math.Exp2(-float64(fleetSeq-seq) / (rankHalfLife * float64(max(ranks, 1))))
}

// prefillStarted records a routed request on its rank. The caller holds
// m.mu.
func (m *model) prefillStarted(q *request) {
	rt := &q.rank.timing
	if rt.pending == 0 {
		rt.busySince = q.routed
	}
	rt.pending++
	m.pendingChanged(q.rank, 1)
	f := &m.fleet
	m.routedAdded(q)
	matched := float64(q.decodeBlocks - q.prefillBlocks)
	f.hits = fleetKeep*f.hits + matched
	f.stores = fleetKeep*f.stores + float64(q.prefillBlocks)
}

// prefillEnded learns from q's prefill, done at now (learn false: released
// without a MarkPrefillDone, so now says nothing); prior is the configured
// seconds per token. The caller holds m.mu.
func (m *model) prefillEnded(q *request, now time.Time, learn bool, prior float64) {
	rt := &q.rank.timing
	rt.pending--
	m.pendingChanged(q.rank, -1)
	if !learn {
		return
	}
	start := q.routed
	if rt.lastDone.After(start) {
		start = rt.lastDone
	}
	busy := now.Sub(start).Seconds()
	rt.lastDone = now
	if rt.pending > 0 {
		rt.busySince = now
	}
	if busy < 0 || q.prefillTokens <= 0 {
		return
	}
	m.gen++ // (the stats below change)
	x := float64(q.decodeAtRoute)
	f := &m.fleet
	// One sample moves the estimate by at most outlierFactor: a stall (a
	// late mark, a paused gateway) would otherwise dominate the sums for
	// hundreds of samples, while a rank that really slowed down still gets
	// there, by that factor per sample.
	e := ratesOf(f, prior)
	busy = min(busy, outlierFactor*float64(q.prefillTokens)*e.secondsPerToken(rt, x))
	f.seq++
	f.stats.add(fleetKeep, float64(q.prefillTokens), busy, x)
	rt.stats.scale(rankDecay(f.seq, rt.seq, f.ranks))
	rt.seq = f.seq
	rt.stats.add(1, float64(q.prefillTokens), busy, x)
}

// rates is the learner's estimate for one model at one Route.
type rates struct {
	slope     float64 // seconds per token per decode block
	intercept float64 // the fleet's seconds per token at no decode load
	pseudo    float64 // the prior's weight in a rank's estimate, in tokens
	queue     float64 // mean pending prefills per rank
	reuse     float64 // expected future hits per stored block
	seq       uint64  // the fleet's samples so far
	ranks     int
	rankRates bool       // fleetTiming.rankRates
	decay     *decayMemo // rankDecay for ranks (nil: computed each time)
	gen       uint64     // the learner's generation it was read at (timeCoster sets it; sptMemo)
}

// ratesOf is f's estimate; prior is the configured seconds per token used
// until timings arrive. The caller holds f's model's lock (f's decay memo).
func ratesOf(f *fleetTiming, prior float64) rates {
	s := &f.stats
	b := s.slope()
	perSample := 1.0 // tokens of one sample, the prior's weight
	if s.n > 0 {
		perSample = s.w / s.n
	}
	a := (s.wy - b*s.wx + perSample*prior) / (s.w + perSample)
	if a <= 0 {
		b, a = 0, (s.wy+perSample*prior)/(s.w+perSample)
	}
	f.decay = f.decay.memoFor(f.ranks)
	out := rates{slope: b, intercept: a, pseudo: priorSamples * perSample, queue: f.queue, seq: f.seq, ranks: f.ranks, rankRates: f.rankRates, decay: f.decay}
	out.reuse = f.hits / (f.stores + 1) // (+1: no division by zero before the first store)
	return out
}

// secondsPerToken is rk's expected prefill time per uncached token at its
// current decode load: the model's rate, or with rankRates the rank's own.
func (e *rates) secondsPerToken(rt *rankTiming, decode float64) float64 {
	if !e.rankRates {
		return e.intercept + e.slope*decode
	}
	s := &rt.stats
	k := e.decay.decay(e.seq, rt.seq, e.ranks)
	a := (k*(s.wy-e.slope*s.wx) + e.pseudo*e.intercept) / (k*s.w + e.pseudo)
	if a <= 0 {
		a = (k*s.wy + e.pseudo*e.intercept) / (k*s.w + e.pseudo)
	}
	return a + e.slope*decode
}

// rememberSecondsPerToken is secondsPerToken, remembered in rt's memo for
// e's generation (which must be the one e was read at, never 0: a memo never
// written holds generation 0). timeCoster.cost calls it when the memo is
// not for e.gen and decode. The caller holds the rank's model's lock (it
// writes the memo).
func (e *rates) rememberSecondsPerToken(rt *rankTiming, decode float64) float64 {
	v := e.secondsPerToken(rt, decode)
	rt.spt = sptMemo{gen: e.gen, decode: decode, value: v}
	return v
}

// waitSeconds is how long a request routed to rk now waits for the prefills
// ahead of it.
func waitSeconds(rk *rank, spt float64, now time.Time) float64 {
	if rk.timing.pending == 0 {
		return 0
	}
	// Less the time the oldest has been running, but no less than the work
	// of the others (an average share each): a late MarkPrefillDone, or a
	// rate estimated too high, must not make a queue look empty.
	all := float64(rk.prefillTokens) * spt
	others := all * float64(rk.timing.pending-1) / float64(rk.timing.pending)
	return max(others, all-now.Sub(rk.timing.busySince).Seconds())
}
