package tracegen

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestParseDist(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Dist
	}{
		{"const:512", Const(512)},
		{"uniform:100,4000", Uniform(100, 4000)},
		{"lognormal:2000,1.5", LogNormal(2000, 1.5)},
		{"LogNormal:mean=2000, sigma=1.5", LogNormal(2000, 1.5)},
		{"exp:30", Exp(30)},
	} {
		got, err := ParseDist(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDist(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseDist(got.String()); err != nil || back != got {
			t.Errorf("round trip of %v: %v, %v", got, back, err)
		}
	}
	for _, bad := range []string{"", "normal:1,2", "const", "const:", "const:-1", "uniform:5,1", "uniform:1",
		"lognormal:0,1", "lognormal:10,-1", "lognormal:sigma=1,mean=10", "exp:0", "const:NaN", "const:x"} {
		if d, err := ParseDist(bad); err == nil {
			t.Errorf("ParseDist(%q) = %v, want an error", bad, d)
		}
	}
	var d Dist
	if err := d.Set("const:7"); err != nil || d != Const(7) {
		t.Fatalf("Set: %v %v", d, err)
	}
}

func TestDistMoments(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 200000
	for _, d := range []Dist{Const(300), Uniform(100, 500), LogNormal(2000, 1.0), LogNormal(50, 0.3), Exp(30)} {
		var sum, sumLog, sumLog2 float64
		lo := math.Inf(1)
		for range n {
			x := d.Sample(r)
			sum += x
			lo = min(lo, x)
			if d.Kind == "lognormal" {
				sumLog += math.Log(x)
				sumLog2 += math.Log(x) * math.Log(x)
			}
		}
		if mean := sum / n; math.Abs(mean-d.Mean()) > 0.02*d.Mean() {
			t.Errorf("%v: sample mean %.1f, want %.1f", d, mean, d.Mean())
		}
		if lo < 0 || (d.Kind == "uniform" && lo < d.A) {
			t.Errorf("%v: sample %v below the support", d, lo)
		}
		if d.Kind == "lognormal" {
			m := sumLog / n
			if sd := math.Sqrt(sumLog2/n - m*m); math.Abs(sd-d.B) > 0.01 {
				t.Errorf("%v: sigma of the log %.3f, want %v", d, sd, d.B)
			}
		}
	}
	if c := Uniform(0, 0.4).Count(r); c != 1 {
		t.Errorf("Count below 1: %d", c)
	}
}

func TestZipf(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range []float64{0, 0.7, 1.0, 1.5} {
		z := NewZipf(50, s)
		sum := 0.0
		for k := range z.N() {
			sum += z.P(k)
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Fatalf("s=%v: probabilities sum to %v", s, sum)
		}
		if got, want := z.P(0)/z.P(9), math.Pow(10, s); math.Abs(got-want) > 1e-9*want {
			t.Fatalf("s=%v: P(0)/P(9) = %v, want %v", s, got, want)
		}
		const n = 200000
		counts := make([]int, z.N())
		for range n {
			counts[z.Sample(r)]++
		}
		for k := range 10 {
			want := n * z.P(k)
			if sd := math.Sqrt(want); math.Abs(float64(counts[k])-want) > 5*sd {
				t.Errorf("s=%v rank %d: %d draws, want %.0f +- %.0f", s, k, counts[k], want, 5*sd)
			}
		}
	}
}
