package discovery

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/fleet"
)

func wk(id, ep string) *kvrouterv1.Worker {
	return &kvrouterv1.Worker{WorkerId: id, Model: "m", Endpoint: ep}
}

func set(ws ...*kvrouterv1.Worker) map[string]*kvrouterv1.Worker {
	m := map[string]*kvrouterv1.Worker{}
	for _, w := range ws {
		m[w.WorkerId] = w
	}
	return m
}

func ids(ws []*kvrouterv1.Worker) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.WorkerId)
	}
	return out
}

func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		desired, registered  map[string]*kvrouterv1.Worker
		complete             bool
		wantUpsert, wantGone []string
	}{
		{"new", set(wk("a", "h:1")), set(), true, []string{"a"}, nil},
		{"same", set(wk("a", "h:1")), set(wk("a", "h:1")), true, nil, nil},
		// dp_size 0 registers as 1: no change.
		{"normalized", set(wk("a", "h:1")), set(&kvrouterv1.Worker{WorkerId: "a", Model: "m", Endpoint: "h:1", DpSize: 1}), true, nil, nil},
		{"new ip", set(wk("a", "h:2")), set(wk("a", "h:1")), true, []string{"a"}, nil},
		{"gone", set(wk("b", "h:1")), set(wk("a", "h:1"), wk("c", "h:1")), true, []string{"b"}, []string{"a", "c"}},
		// A source has not reported: nothing leaves.
		{"incomplete", set(), set(wk("a", "h:1")), false, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Diff(tc.desired, tc.registered, tc.complete)
			if !reflect.DeepEqual(ids(c.Upsert), tc.wantUpsert) || !reflect.DeepEqual(c.Remove, tc.wantGone) {
				t.Fatalf("Diff: upsert %v remove %v; want %v %v", ids(c.Upsert), c.Remove, tc.wantUpsert, tc.wantGone)
			}
		})
	}
}

// The syncer leaves the config file's and the API's workers alone, removes
// only discovery's, waits for every source before removing, and merges
// sources.
func TestSyncerPrecedence(t *testing.T) {
	reg := newMemRegistry()
	ctx := context.Background()
	reg.Upsert(ctx, wk("cfg", "c:1"), string(fleet.SourceConfig))
	reg.Upsert(ctx, wk("old", "o:1"), string(fleet.SourceDiscovery)) // from before a restart
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSyncer(SyncConfig{Registry: reg, Sources: []string{"dns", "kubernetes"}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	s.Report("kubernetes", []*kvrouterv1.Worker{wk("cfg", "k:1"), wk("p", "k:2")})
	r := s.Sync(ctx)
	if r.Complete || !reflect.DeepEqual(r.Outranked, []string{"cfg"}) || len(r.Removed) != 0 {
		t.Fatalf("first sync %+v", r)
	}
	if got, want := reg.String(), "cfg=c:1(config) old=o:1(discovery) p=k:2(discovery)"; got != want {
		t.Fatalf("registry %q; want %q", got, want)
	}
	s.Report("dns", []*kvrouterv1.Worker{wk("d", "d:1"), {WorkerId: "bad", Model: "m", Endpoint: "no-port"}})
	r = s.Sync(ctx)
	if !r.Complete || len(r.Errors) != 1 || !errors.Is(r.Errors[0], fleet.ErrInvalid) {
		t.Fatalf("second sync %+v; want complete with one ErrInvalid", r)
	}
	if got := testutil.ToFloat64(m.refused); got != 1 {
		t.Fatalf("registry errors counted %v; want 1 (outranked workers are not refusals)", got)
	}
	if got, want := reg.String(), "cfg=c:1(config) d=d:1(discovery) p=k:2(discovery)"; got != want {
		t.Fatalf("registry %q; want %q", got, want)
	}
}
