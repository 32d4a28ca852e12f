package tracegen

import (
	"math"
	"math/rand/v2"
	"testing"
)

// counts draws the process over [0, horizon) and counts arrivals per window.
func counts(t *testing.T, a Arrival, horizon, window float64, seed uint64) []int {
	t.Helper()
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	out := make([]int, int(horizon/window))
	arr := a.Start(rand.New(rand.NewPCG(seed, 1)), 0)
	last := 0.0
	for x := arr.Next(); x < horizon; x = arr.Next() {
		if x < last {
			t.Fatalf("%s: arrival %v after %v", a.Process, x, last)
		}
		last = x
		out[int(x/window)]++
	}
	return out
}

func meanVar(c []int) (mean, variance float64) {
	for _, x := range c {
		mean += float64(x)
	}
	mean /= float64(len(c))
	for _, x := range c {
		variance += (float64(x) - mean) * (float64(x) - mean)
	}
	return mean, variance / float64(len(c)-1)
}

func TestArrivalRates(t *testing.T) {
	const horizon = 100000.0 // seconds; 200,000 arrivals at rate 2
	for _, a := range []Arrival{
		{Process: Poisson, Rate: 2},
		{Process: Bursty, Rate: 2, BurstOn: 20, BurstOff: 40},
		{Process: Diurnal, Rate: 2, Period: horizon / 4, Amplitude: 0.6},
	} {
		c := counts(t, a, horizon, 10, 7)
		mean, variance := meanVar(c)
		rate := mean / 10
		if math.Abs(rate-a.Rate) > 0.03*a.Rate {
			t.Errorf("%s: rate %.3f/s, want %v within 3%%", a.Process, rate, a.Rate)
		}
		// Index of dispersion of 10 s counts: 1 for Poisson; far above for
		// on/off bursts (a burst's 20 s spans whole windows at 3x the rate).
		disp := variance / mean
		switch a.Process {
		case Poisson:
			if disp < 0.9 || disp > 1.1 {
				t.Errorf("poisson: dispersion %.2f, want about 1", disp)
			}
		case Bursty:
			if disp < 5 {
				t.Errorf("bursty: dispersion %.2f, want well above Poisson's 1", disp)
			}
			zero := 0
			for _, x := range c {
				if x == 0 {
					zero++
				}
			}
			// Off periods (mean 40 s) leave many 10 s windows empty; Poisson
			// at 20 per window essentially never does.
			if frac := float64(zero) / float64(len(c)); frac < 0.2 {
				t.Errorf("bursty: %.0f%% of windows empty, want off periods", 100*frac)
			}
		}
	}
}

func TestDiurnalShape(t *testing.T) {
	a := Arrival{Process: Diurnal, Rate: 3, Period: 4000, Amplitude: 0.6}
	c := counts(t, a, 40000, 500, 9) // 10 periods of 8 windows
	got := make([]float64, 8)
	for i, x := range c {
		got[i%8] += float64(x) / 10
	}
	for w := range 8 {
		// Expected arrivals in the window: the integral of the rate.
		want := 0.0
		for s := 0.5; s < 500; s++ {
			want += a.RateAt(float64(w)*500 + s)
		}
		if math.Abs(got[w]-want) > 0.06*want {
			t.Errorf("window %d of the period: %.0f arrivals, want %.0f", w, got[w], want)
		}
	}
	if got[4] < 3*got[0] {
		t.Errorf("peak %.0f vs trough %.0f: no diurnal swing", got[4], got[0])
	}
}

func TestArrivalValidate(t *testing.T) {
	for _, a := range []Arrival{
		{Process: Poisson},
		{Process: "hawkes", Rate: 1},
		{Process: Bursty, Rate: 1},
		{Process: Diurnal, Rate: 1, Period: 10, Amplitude: 1.5},
		{Process: Diurnal, Rate: 1},
	} {
		if a.Validate() == nil {
			t.Errorf("%+v accepted", a)
		}
	}
}
