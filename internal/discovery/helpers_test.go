package discovery

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/fleet"
)

// memRegistry is a registry with the fleet's precedence rules, so that the
// syncer's tests see what it asked for; internal/app's test runs it
// against the real fleet.
type memRegistry struct {
	mu   sync.Mutex
	regs map[string]fleet.Registration
}

func newMemRegistry() *memRegistry { return &memRegistry{regs: map[string]fleet.Registration{}} }

func (m *memRegistry) Upsert(_ context.Context, w *kvrouterv1.Worker, source string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.regs[w.WorkerId]; ok && cur.Source.Outranks(fleet.Source(source)) {
		return fmt.Errorf("%w: %s", fleet.ErrOutranked, w.WorkerId)
	}
	if err := fleet.Validate(w); err != nil {
		return err
	}
	m.regs[w.WorkerId] = fleet.Registration{Worker: normalized(w), Source: fleet.Source(source)}
	return nil
}

func (m *memRegistry) Remove(_ context.Context, id, source string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.regs[id]
	switch {
	case !ok:
		return fleet.ErrNotFound
	case cur.Source.Outranks(fleet.Source(source)):
		return fleet.ErrOutranked
	}
	delete(m.regs, id)
	return nil
}

func (m *memRegistry) List(string) []fleet.Registration {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]fleet.Registration, 0, len(m.regs))
	for _, r := range m.regs {
		out = append(out, fleet.Registration{Worker: proto.CloneOf(r.Worker), Source: r.Source})
	}
	return out
}

// String is the registry as "id=endpoint(source)" sorted, for assertions.
func (m *memRegistry) String() string {
	var s []string
	for _, r := range m.List("") {
		s = append(s, fmt.Sprintf("%s=%s(%s)", r.Worker.WorkerId, r.Worker.Endpoint, r.Source))
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

// syncs runs a syncer over reg with sources, and returns its results as
// they happen.
func runSyncer(t *testing.T, ctx context.Context, reg Registry, sources ...Source) <-chan Result {
	t.Helper()
	results := make(chan Result, 64)
	var names []string
	for _, s := range sources {
		names = append(names, s.Name())
	}
	s, err := NewSyncer(SyncConfig{Registry: reg, Sources: names, OnSync: func(r Result) {
		select {
		case results <- r:
		case <-ctx.Done():
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() { s.Run(ctx) })
	for _, src := range sources {
		wg.Go(func() {
			if err := src.Run(ctx, func(ws []*kvrouterv1.Worker) { s.Report(src.Name(), ws) }); err != nil {
				t.Errorf("%s: %v", src.Name(), err)
			}
		})
	}
	return results
}

// waitRegistry reads sync results until the registry reads want. The
// deadline only bounds a failing test; the wait is on the syncs.
func waitRegistry(t *testing.T, results <-chan Result, reg *memRegistry, want string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for reg.String() != want {
		select {
		case <-results:
		case <-deadline:
			t.Fatalf("registry %q; want %q", reg.String(), want)
		}
	}
}

// eventually polls cond until it holds, for what no sync result reports
// (a source's failed look). The deadline only bounds a failing test.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling interval, not synchronization
	}
}
