package app

import (
	"testing"

	"google.golang.org/protobuf/proto"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/state"
)

// TestRegistryStoreKeepsEveryField: a registration stored in the state
// dir's registry and read back after a reopen is the one registered, every
// field of it (a field the mapping forgets comes back zero).
func TestRegistryStoreKeepsEveryField(t *testing.T) {
	path := t.TempDir()
	w := &kvrouterv1.Worker{
		WorkerId: "w", Model: "m", Endpoint: "10.0.0.1:8000", KvEventsEndpoint: "tcp://10.0.0.1:5557",
		ReplayEndpoint: "tcp://10.0.0.1:5600", Topic: "kv", DpSize: 2, BlockSize: 16, CapacityTokens: 1 << 20,
		RankKvEventsEndpoints: []string{"tcp://10.0.0.1:5557", "tcp://10.0.0.2:5557"},
		RankReplayEndpoints:   []string{"tcp://10.0.0.1:5600", "tcp://10.0.0.2:5600"},
		RankEndpoints:         []string{"10.0.0.1:8000", "10.0.0.2:8000"},
	}
	open := func() (*state.Dir, *state.Registry) {
		d, err := state.OpenDir(state.DirConfig{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		r, _, err := state.OpenRegistry(state.RegistryConfig{Dir: d})
		if err != nil {
			t.Fatal(err)
		}
		return d, r
	}
	d, r := open()
	if err := (registryStore{r}).Put(w, fleet.SourceAPI); err != nil {
		t.Fatal(err)
	}
	r.Close()
	d.Close()
	d, r = open()
	defer d.Close()
	defer r.Close()
	got, ok := r.Get("w")
	if !ok {
		t.Fatal("worker not stored")
	}
	if pw := protoWorker(got); !proto.Equal(pw, w) {
		t.Fatalf("read back %v, want %v", pw, w)
	}
}
