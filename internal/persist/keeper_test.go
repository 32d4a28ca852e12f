package persist

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

// memRemote is a Remote in memory: objects newest first; a name in bad
// reads back with ErrBadObject, one in broken fails to open.
type memRemote struct {
	mu        sync.Mutex
	objs      []Object
	data      map[string][]byte
	bad       map[string]bool
	broken    map[string]bool
	refused   []string
	down      bool
	listCalls int
}

func newMemRemote() *memRemote {
	return &memRemote{data: map[string][]byte{}, bad: map[string]bool{}, broken: map[string]bool{}}
}

func (m *memRemote) Snapshots(context.Context) ([]Object, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.listCalls++
	return append([]Object(nil), m.objs...), nil
}

func (m *memRemote) OpenSnapshot(_ context.Context, name string) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.broken[name] {
		return nil, errors.New("timeout")
	}
	if m.bad[name] {
		return io.NopCloser(io.MultiReader(bytes.NewReader(m.data[name][:8]), errReader{fmt.Errorf("%w: digest", ErrBadObject)})), nil
	}
	return io.NopCloser(bytes.NewReader(m.data[name])), nil
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func (m *memRemote) RefusedSnapshot(name string, _ error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refused = append(m.refused, name)
}

func (m *memRemote) PutSnapshot(_ context.Context, fill func(io.Writer) error) (Object, error) {
	var b bytes.Buffer
	if err := fill(&b); err != nil {
		return Object{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o := Object{Name: fmt.Sprintf("snap-%d", len(m.objs)), Size: uint64(b.Len()), ModTime: time.Unix(int64(len(m.objs)), 0)}
	m.data[o.Name] = b.Bytes()
	m.objs = append([]Object{o}, m.objs...)
	return o, nil
}

func (m *memRemote) Connected() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.down
}

// TestKeeperRemote: the shutdown snapshot is uploaded (streamed from the
// index without a state dir); a keeper with no local snapshot restores the
// newest object that reads back whole, refusing a bad one by name; an
// upload while disconnected is skipped, not an error.
func TestKeeperRemote(t *testing.T) {
	ranks, ix, cp := snapshotFixture(t)
	remote := newMemRemote()
	k, err := NewKeeper(KeeperConfig{Remote: remote, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	k.Final(ix, cp)
	k.Final(ix, cp)
	if len(remote.objs) != 2 {
		t.Fatalf("%d objects after two shutdown snapshots, want 2", len(remote.objs))
	}
	remote.bad[remote.objs[0].Name] = true

	st := open(t, t.TempDir(), nil)
	defer st.Close()
	k2, err := NewKeeper(KeeperConfig{Local: st, Remote: remote, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	res, err := k2.Restore(testIndex)
	if err != nil {
		t.Fatal(err)
	}
	if res.Index == nil || len(remote.refused) != 1 || remote.refused[0] != remote.objs[0].Name {
		t.Fatalf("restored %v, refused %v; want the older object, the newer refused", res.Index, remote.refused)
	}
	sameIndex(t, ix, res.Index, ranks)

	// With a local snapshot the remote is not read.
	k2.Final(ix, cp)
	calls := remote.listCalls
	if res, err := k2.Restore(testIndex); err != nil || res.Snapshot.Path == "" || remote.listCalls != calls {
		t.Fatalf("restore with a local snapshot: %q, %v, %d listings; want the local file, no listing", res.Snapshot.Path, err, remote.listCalls-calls)
	}

	remote.down = true
	n := len(remote.objs)
	if err := k2.upload(ix, cp, false); err != nil || len(remote.objs) != n {
		t.Fatalf("upload while disconnected: %v, %d objects (was %d); want skipped", err, len(remote.objs), n)
	}
}

// TestKeeperRemoteUnreadable: objects that fail to read (not bad: a
// timeout) are listed again a bounded number of times, then the index
// starts empty.
func TestKeeperRemoteUnreadable(t *testing.T) {
	_, ix, cp := snapshotFixture(t)
	remote := newMemRemote()
	k, err := NewKeeper(KeeperConfig{Remote: remote, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	k.Final(ix, cp)
	remote.broken[remote.objs[0].Name] = true
	res, err := k.Restore(testIndex)
	if err != nil || res.Index != nil || remote.listCalls != restoreRounds || len(remote.refused) != 0 {
		t.Fatalf("restore of an unreadable object: %v, %v, %d listings, refused %v; want none after %d listings, none refused",
			res.Index, err, remote.listCalls, remote.refused, restoreRounds)
	}
	if _, err := NewKeeper(KeeperConfig{Remote: remote}); err == nil {
		t.Fatal("a Remote without a Timeout accepted")
	}
}

// TestKeeperRun: the loop writes a snapshot to the state dir each
// interval and stops when ctx is done.
func TestKeeperRun(t *testing.T) {
	_, ix, cp := snapshotFixture(t)
	st := open(t, t.TempDir(), nil)
	defer st.Close()
	k, err := NewKeeper(KeeperConfig{Local: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.Run(ctx, time.Millisecond, ix, cp); close(done) }()
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := st.Restore(testIndex)
		if err != nil {
			t.Fatal(err)
		}
		if res.Snapshot.Path != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no snapshot written by the loop within a minute")
		}
		time.Sleep(time.Millisecond) // polling the directory for the loop's first write
	}
	cancel()
	<-done
}
