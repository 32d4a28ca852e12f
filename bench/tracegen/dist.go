package tracegen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Dist is a named distribution of non-negative values: lengths in tokens,
// counts (turns, steps) or times in seconds. Written and parsed as
// KIND:ARGS (see ParseDist); it is a flag.Value.
type Dist struct {
	// Kind is "const", "uniform", "lognormal" or "exp".
	Kind string
	// A and B are the parameters: const: value, -; uniform: min, max;
	// lognormal: mean, sigma (of the log); exp: mean, -.
	A, B float64
}

// Const, Uniform, LogNormal and Exp build distributions.
func Const(v float64) Dist               { return Dist{Kind: "const", A: v} }
func Uniform(lo, hi float64) Dist        { return Dist{Kind: "uniform", A: lo, B: hi} }
func LogNormal(mean, sigma float64) Dist { return Dist{Kind: "lognormal", A: mean, B: sigma} }
func Exp(mean float64) Dist              { return Dist{Kind: "exp", A: mean} }

// distArgs names each kind's parameters, in order.
var distArgs = map[string][]string{
	"const":     {"value"},
	"uniform":   {"min", "max"},
	"lognormal": {"mean", "sigma"},
	"exp":       {"mean"},
}

// ParseDist parses KIND:ARGS: "const:512", "uniform:100,4000",
// "lognormal:2000,1.0" (mean in the value's unit, sigma of the underlying
// normal) or "exp:30" (mean). Arguments may be named ("lognormal:mean=2000,sigma=1").
func ParseDist(s string) (Dist, error) {
	kind, rest, _ := strings.Cut(strings.TrimSpace(s), ":")
	kind = strings.ToLower(kind)
	names, ok := distArgs[kind]
	if !ok {
		return Dist{}, fmt.Errorf("distribution %q: want const:V, uniform:MIN,MAX, lognormal:MEAN,SIGMA or exp:MEAN", s)
	}
	parts := strings.Split(rest, ",")
	if rest == "" || len(parts) != len(names) {
		return Dist{}, fmt.Errorf("distribution %q: %s takes %d argument(s) (%s)", s, kind, len(names), strings.Join(names, ","))
	}
	var v [2]float64
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if k, val, named := strings.Cut(p, "="); named {
			if strings.TrimSpace(k) != names[i] {
				return Dist{}, fmt.Errorf("distribution %q: argument %d is %s, not %q", s, i+1, names[i], k)
			}
			p = strings.TrimSpace(val)
		}
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return Dist{}, fmt.Errorf("distribution %q: %s %q is not a number", s, names[i], p)
		}
		v[i] = f
	}
	d := Dist{Kind: kind, A: v[0], B: v[1]}
	return d, d.Validate()
}

// Validate reports a distribution that cannot be sampled or can go negative.
func (d Dist) Validate() error {
	switch d.Kind {
	case "const":
		if d.A < 0 {
			return fmt.Errorf("%v: negative value", d)
		}
	case "uniform":
		if d.A < 0 || d.B < d.A {
			return fmt.Errorf("%v: want 0 <= min <= max", d)
		}
	case "lognormal":
		if d.A <= 0 || d.B < 0 {
			return fmt.Errorf("%v: want mean > 0 and sigma >= 0", d)
		}
	case "exp":
		if d.A <= 0 {
			return fmt.Errorf("%v: want mean > 0", d)
		}
	default:
		return fmt.Errorf("unknown distribution kind %q", d.Kind)
	}
	return nil
}

// String is the KIND:ARGS form ParseDist reads.
func (d Dist) String() string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	switch d.Kind {
	case "uniform", "lognormal":
		return d.Kind + ":" + f(d.A) + "," + f(d.B)
	case "":
		return ""
	}
	return d.Kind + ":" + f(d.A)
}

// Set parses s into d (flag.Value).
func (d *Dist) Set(s string) error {
	v, err := ParseDist(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Mean is the distribution's mean.
func (d Dist) Mean() float64 {
	switch d.Kind {
	case "uniform":
		return (d.A + d.B) / 2
	}
	return d.A // const value, lognormal and exp mean
}

// Sample draws one value.
func (d Dist) Sample(r *rand.Rand) float64 {
	switch d.Kind {
	case "const":
		return d.A
	case "uniform":
		return d.A + (d.B-d.A)*r.Float64()
	case "lognormal":
		// mean = exp(mu + sigma^2/2)
		mu := math.Log(d.A) - d.B*d.B/2
		return math.Exp(mu + d.B*r.NormFloat64())
	case "exp":
		return d.A * r.ExpFloat64()
	}
	panic("tracegen: sampling invalid distribution " + d.Kind)
}

// Count draws a value rounded to the nearest integer, at least 1: a length
// in tokens or a number of turns.
func (d Dist) Count(r *rand.Rand) int {
	return max(1, int(math.Round(d.Sample(r))))
}
