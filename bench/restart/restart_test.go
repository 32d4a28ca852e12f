package restart

import (
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/bench/trace"
)

// validConfig is the smallest Config validate accepts.
func validConfig() Config {
	return Config{
		Requests: []trace.Request{{Arrival: 0, InputLength: 16}},
		Engines:  2, KillMin: time.Second, KillMax: 2 * time.Second,
		SpeedUp: 10, Snapshot: time.Second, Timeout: time.Minute,
		Policy: PolicyRoute, Out: io.Discard, Progress: io.Discard,
	}
}

// TestConfigValidate checks that every Config that cannot run is refused
// with ErrConfig, and the smallest runnable one is not.
func TestConfigValidate(t *testing.T) {
	if err := (&Config{}).validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("empty Config: %v, want ErrConfig", err)
	}
	c := validConfig()
	if err := c.validate(); err != nil {
		t.Fatalf("valid Config refused: %v", err)
	}
	for name, bad := range map[string]func(*Config){
		"empty trace":                    func(c *Config) { c.Requests = nil },
		"no engines":                     func(c *Config) { c.Engines = 0 },
		"engine restart with one engine": func(c *Config) { c.Engines, c.RestartEng = 1, true },
		"kill window reversed":           func(c *Config) { c.KillMax = c.KillMin / 2 },
		"kill at zero":                   func(c *Config) { c.KillMin = 0 },
		"speed-up zero":                  func(c *Config) { c.SpeedUp = 0 },
		"snapshot interval zero":         func(c *Config) { c.Snapshot = 0 },
		"timeout negative":               func(c *Config) { c.Timeout = -time.Second },
		"unknown policy":                 func(c *Config) { c.Policy = "nearest" },
		"no report writer":               func(c *Config) { c.Out = nil },
		"no progress writer":             func(c *Config) { c.Progress = nil },
	} {
		c := validConfig()
		bad(&c)
		if err := c.validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// TestRepeatTrace checks that the schedule plays the trace again, each pass
// after the last one's span plus the mean gap, up to and including until,
// and remembers which request each entry is.
func TestRepeatTrace(t *testing.T) {
	reqs := []trace.Request{{Arrival: 10 * time.Second}, {Arrival: 12 * time.Second}, {Arrival: 14 * time.Second}}
	sched, orig := repeatTrace(reqs, 12*time.Second)
	var at []time.Duration
	for _, q := range sched {
		at = append(at, q.Arrival)
	}
	// span 4 s, mean gap 2 s: passes start at 0, 6 s, 12 s.
	wantAt := []time.Duration{0, 2 * time.Second, 4 * time.Second, 6 * time.Second, 8 * time.Second, 10 * time.Second, 12 * time.Second}
	if !slices.Equal(at, wantAt) {
		t.Errorf("arrivals %v, want %v", at, wantAt)
	}
	if want := []int{0, 1, 2, 0, 1, 2, 0}; !slices.Equal(orig, want) {
		t.Errorf("orig %v, want %v", orig, want)
	}
	if reqs[0].Arrival != 10*time.Second {
		t.Error("repeatTrace changed its input")
	}
	// One request: passes a second apart.
	sched, _ = repeatTrace(reqs[:1], 2*time.Second)
	if len(sched) != 3 || sched[2].Arrival != 2*time.Second {
		t.Errorf("one request: %+v, want arrivals 0, 1 s, 2 s", sched)
	}
}

// TestSeqSampleBefore checks that the engines' seqs at a time are the last
// sample taken at or before it, and zeros before the first.
func TestSeqSampleBefore(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	samples := []seqSample{
		{at: t0, seqs: []uint64{1, 2}},
		{at: t0.Add(50 * time.Millisecond), seqs: []uint64{3, 4}},
		{at: t0.Add(100 * time.Millisecond), seqs: []uint64{5, 6}},
	}
	for _, c := range []struct {
		at   time.Time
		want []uint64
	}{
		{t0.Add(-time.Millisecond), []uint64{0, 0}},
		{t0, []uint64{1, 2}},
		{t0.Add(99 * time.Millisecond), []uint64{3, 4}},
		{t0.Add(time.Second), []uint64{5, 6}},
	} {
		if got := seqSampleBefore(samples, c.at, 2); !slices.Equal(got, c.want) {
			t.Errorf("at %v: %v, want %v", c.at.Sub(t0), got, c.want)
		}
	}
}
