package tracegen

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Arrival processes, selectable independently of the shape. Each has mean
// rate Rate (requests per second over the trace):
//
//   - poisson: exponential gaps at Rate.
//   - bursty: a Markov-modulated on/off Poisson process. On and off periods
//     last exponential times with means BurstOn and BurstOff; requests arrive
//     only while on, at Rate*(BurstOn+BurstOff)/BurstOn, so the long-run mean
//     is Rate. Counts over windows shorter than a period are overdispersed
//     (variance well above the mean), unlike Poisson's.
//   - diurnal: a Poisson process whose rate follows one sinusoid,
//     Rate*(1 - Amplitude*cos(2*pi*t/Period)): the trough at t = 0, the peak
//     at Period/2, mean Rate over a whole period (Period 0 means the trace's
//     duration, one "day" per trace). Drawn by thinning.
const (
	Poisson = "poisson"
	Bursty  = "bursty"
	Diurnal = "diurnal"
)

// Arrival configures an arrival process. Times are in seconds.
type Arrival struct {
	Process string
	Rate    float64
	// BurstOn and BurstOff are the mean on and off periods of bursty.
	BurstOn, BurstOff float64
	// Period and Amplitude (0..1) shape diurnal.
	Period, Amplitude float64
}

// Validate reports an unusable configuration.
func (a Arrival) Validate() error {
	if !(a.Rate > 0) || math.IsInf(a.Rate, 0) {
		return fmt.Errorf("arrival rate %v: want a positive rate", a.Rate)
	}
	switch a.Process {
	case Poisson:
	case Bursty:
		if !(a.BurstOn > 0) || a.BurstOff < 0 {
			return fmt.Errorf("bursty: want burst-on > 0 and burst-off >= 0 (got %v, %v)", a.BurstOn, a.BurstOff)
		}
	case Diurnal:
		if !(a.Period > 0) || a.Amplitude < 0 || a.Amplitude > 1 {
			return fmt.Errorf("diurnal: want period > 0 and 0 <= amplitude <= 1 (got %v, %v)", a.Period, a.Amplitude)
		}
	default:
		return fmt.Errorf("arrival process %q: want poisson, bursty or diurnal", a.Process)
	}
	return nil
}

// RateAt is the expected rate at time t: the modulated rate for diurnal,
// Rate for the others (bursty's rate depends on its hidden state).
func (a Arrival) RateAt(t float64) float64 {
	if a.Process == Diurnal {
		return a.Rate * (1 - a.Amplitude*math.Cos(2*math.Pi*t/a.Period))
	}
	return a.Rate
}

// Arrivals yields increasing arrival times.
type Arrivals interface {
	Next() float64
}

// Start returns the process's arrivals after time start, drawn from r.
// The configuration must be valid.
func (a Arrival) Start(r *rand.Rand, start float64) Arrivals {
	switch a.Process {
	case Bursty:
		b := &bursty{a: a, r: r, t: start, peak: a.Rate * (a.BurstOn + a.BurstOff) / a.BurstOn}
		// Start in the stationary state; periods are memoryless, so the
		// remaining period is a fresh draw.
		b.on = r.Float64()*(a.BurstOn+a.BurstOff) < a.BurstOn
		b.end = start + b.period()
		return b
	case Diurnal:
		return &diurnal{a: a, r: r, t: start, max: a.Rate * (1 + a.Amplitude)}
	}
	return &poisson{rate: a.Rate, r: r, t: start}
}

type poisson struct {
	rate float64
	r    *rand.Rand
	t    float64
}

func (p *poisson) Next() float64 {
	p.t += p.r.ExpFloat64() / p.rate
	return p.t
}

type bursty struct {
	a      Arrival
	r      *rand.Rand
	t, end float64 // now, end of the current period
	on     bool
	peak   float64
}

func (b *bursty) period() float64 {
	if b.on {
		return b.a.BurstOn * b.r.ExpFloat64()
	}
	return b.a.BurstOff * b.r.ExpFloat64()
}

func (b *bursty) Next() float64 {
	for {
		if b.on {
			if t := b.t + b.r.ExpFloat64()/b.peak; t < b.end {
				b.t = t
				return t
			}
		}
		// The period ends before the next arrival (or is off): switch.
		b.t, b.on = b.end, !b.on
		b.end = b.t + b.period()
	}
}

type diurnal struct {
	a   Arrival
	r   *rand.Rand
	t   float64
	max float64
}

func (d *diurnal) Next() float64 {
	for {
		d.t += d.r.ExpFloat64() / d.max
		if d.r.Float64()*d.max < d.a.RateAt(d.t) {
			return d.t
		}
	}
}
