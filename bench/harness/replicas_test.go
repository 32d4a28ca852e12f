package harness

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeMetrics serves a router's load sync counters on /metrics.
type fakeMetrics struct {
	mu                     sync.Mutex
	sent, applied, unknown int
	refused                int
}

func (f *fakeMetrics) set(sent, applied, unknown, refused int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent, f.applied, f.unknown, f.refused = sent, applied, unknown, refused
}

func (f *fakeMetrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(w, "# HELP kvrouter_cluster_changes_total x\n")
	fmt.Fprintf(w, "kvrouter_cluster_changes_total{result=\"applied\"} %d\n", f.applied)
	fmt.Fprintf(w, "kvrouter_cluster_changes_total{result=\"malformed\"} 7\n")
	fmt.Fprintf(w, "kvrouter_cluster_changes_total{result=\"refused\"} %d\n", f.refused)
	fmt.Fprintf(w, "kvrouter_cluster_changes_total{result=\"sent\"} %d\n", f.sent)
	fmt.Fprintf(w, "kvrouter_cluster_changes_total{result=\"unknown_worker\"} %d\n", f.unknown)
	fmt.Fprintf(w, "kvrouter_cluster_changes_total_other{result=\"sent\"} 1000\n")
}

// TestLoadSynced: replicas are synced once each has received (applied,
// refused or not yet registered) as many changes as the other live
// replicas sent; malformed messages and other series do not count, and a
// replica that exited is left out.
func TestLoadSynced(t *testing.T) {
	fakes := make([]*fakeMetrics, 3)
	rs := &Replicas{}
	for i := range fakes {
		fakes[i] = new(fakeMetrics)
		srv := httptest.NewServer(fakes[i])
		t.Cleanup(srv.Close)
		rs.Routers = append(rs.Routers, &Router{HTTPAddr: strings.TrimPrefix(srv.URL, "http://"), exited: make(chan struct{})})
	}
	synced := func(want bool) {
		t.Helper()
		got, err := rs.LoadSynced()
		if err != nil || got != want {
			t.Fatalf("LoadSynced = %v, %v; want %v", got, err, want)
		}
	}
	fakes[0].set(5, 4, 0, 0)
	fakes[1].set(3, 7, 0, 0)
	fakes[2].set(2, 8, 0, 0)
	synced(false) // replica 0 has 4 of the others' 5
	fakes[0].set(5, 3, 1, 1)
	synced(true)
	fakes[2].set(4, 8, 0, 0) // two more from replica 2: the others have not seen them
	synced(false)
	fakes[0].set(5, 5, 1, 1)
	fakes[1].set(3, 9, 0, 0)
	synced(true)
	fakes[1].set(9, 9, 0, 0) // replica 1 sent more, then exited
	synced(false)
	close(rs.Routers[1].exited)
	synced(true) // what replica 1 sent before it exited no longer holds the others
	fakes[0].set(5, 2, 1, 0)
	synced(false) // replica 0 has 3 of replica 2's 4
}
