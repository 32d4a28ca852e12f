package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	kvrouterv1 "github.com/kvrouter/kvrouter/api/proto/kvrouter/v1"
	"github.com/kvrouter/kvrouter/internal/ingest"
	"github.com/kvrouter/kvrouter/internal/radix"
	"github.com/kvrouter/kvrouter/internal/scoring"
)

// memStore is a Store in memory that logs its writes and can be made to
// fail or to refuse an id (as a store shared by replicas does).
type memStore struct {
	log   []string
	held  map[string]Source
	fail  error
	taken map[string]bool // ids another replica holds
}

func (m *memStore) Put(w *kvrouterv1.Worker, src Source) error {
	if m.fail != nil {
		return m.fail
	}
	if m.taken[w.WorkerId] {
		return fmt.Errorf("%w (by another replica)", ErrRegistered)
	}
	m.log = append(m.log, fmt.Sprintf("put %s %s", w.WorkerId, src))
	m.held[w.WorkerId] = src
	return nil
}

func (m *memStore) Replace(w *kvrouterv1.Worker, src Source) error {
	if m.fail != nil {
		return m.fail
	}
	m.log = append(m.log, fmt.Sprintf("replace %s %s", w.WorkerId, src))
	m.held[w.WorkerId] = src
	return nil
}

func (m *memStore) Delete(id string) error {
	if m.fail != nil {
		return m.fail
	}
	m.log = append(m.log, "delete "+id)
	delete(m.held, id)
	return nil
}

func newTestFleet(t *testing.T, store Store, maxWorkers int) *Fleet {
	t.Helper()
	idx := radix.New(radix.Config{})
	ing, err := ingest.New(ingest.Config{Index: idx, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ing.Close() })
	rt, err := scoring.New(scoring.Config{Index: idx, BlockSize: 16, MaxWorkers: maxWorkers})
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(Config{Router: rt, Ingest: ing, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// sentinels name the errors a command's output reports.
var sentinels = []struct {
	name string
	err  error
}{
	{"ErrInvalid", ErrInvalid}, {"ErrRegistered", ErrRegistered}, {"ErrRemoving", ErrRemoving},
	{"ErrNotFound", ErrNotFound}, {"ErrOutranked", ErrOutranked}, {"ErrFull", ErrFull}, {"ErrStore", ErrStore},
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	var names []string
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			names = append(names, s.name)
		}
	}
	return fmt.Sprintf("%s: %v", strings.Join(names, ","), err)
}

// TestFleet runs testdata/fleet: the lifecycle a worker goes through from
// each source, and the precedence between sources.
//
//	upsert id=w source=api [model=m] [endpoint=h:1] [dp=2]   Upsert
//	remove id=w source=discovery                              Remove
//	register id=w source=api [store]                          Register
//	unregister id=w [store]                                   Unregister
//	store fail=disk_full | store ok | store taken=w           the store's next answers
//	list                                                      registrations, and the store's log since the last list
func TestFleet(t *testing.T) {
	store := &memStore{held: map[string]Source{}, taken: map[string]bool{}}
	f := newTestFleet(t, store, 3)
	ctx := context.Background()
	datadriven.RunTest(t, "testdata/fleet", func(t *testing.T, d *datadriven.TestData) string {
		var id, src string
		if d.HasArg("id") {
			d.ScanArgs(t, "id", &id)
		}
		if d.HasArg("source") {
			d.ScanArgs(t, "source", &src)
		}
		switch d.Cmd {
		case "upsert":
			return errString(f.Upsert(ctx, workerArg(t, d, id), src))
		case "remove":
			return errString(f.Remove(ctx, id, src))
		case "register":
			return errString(f.Register(workerArg(t, d, id), Source(src), d.HasArg("store")))
		case "unregister":
			return errString(f.Unregister(id, d.HasArg("store")))
		case "store":
			store.fail = nil
			if d.HasArg("fail") {
				var msg string
				d.ScanArgs(t, "fail", &msg)
				store.fail = errors.New(msg)
			}
			if d.HasArg("taken") {
				var taken string
				d.ScanArgs(t, "taken", &taken)
				store.taken[taken] = true
			}
			return "ok"
		case "list":
			return listString(f, store)
		}
		t.Fatalf("unknown command %q", d.Cmd)
		return ""
	})
}

func workerArg(t *testing.T, d *datadriven.TestData, id string) *kvrouterv1.Worker {
	w := &kvrouterv1.Worker{WorkerId: id, Model: "m"}
	if d.HasArg("model") {
		d.ScanArgs(t, "model", &w.Model)
	}
	if d.HasArg("endpoint") {
		d.ScanArgs(t, "endpoint", &w.Endpoint)
	}
	if d.HasArg("dp") {
		var dp int
		d.ScanArgs(t, "dp", &dp)
		w.DpSize = uint32(dp)
	}
	return w
}

func listString(f *Fleet, store *memStore) string {
	regs := f.List("")
	slices.SortFunc(regs, func(a, b Registration) int { return strings.Compare(a.Worker.WorkerId, b.Worker.WorkerId) })
	var b strings.Builder
	for _, r := range regs {
		fmt.Fprintf(&b, "%s %s model=%s endpoint=%s dp=%d\n", r.Worker.WorkerId, r.Source, r.Worker.Model, r.Worker.Endpoint, r.Worker.DpSize)
	}
	for _, l := range store.log {
		fmt.Fprintf(&b, "store: %s\n", l)
	}
	store.log = nil
	if b.Len() == 0 {
		return "empty"
	}
	return strings.TrimSuffix(b.String(), "\n")
}
