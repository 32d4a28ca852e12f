package state

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMain runs the helper processes the tests start (see helperMain).
func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode, os.Getenv(helperDirEnv)))
	}
	os.Exit(m.Run())
}

const (
	helperEnv    = "KVROUTER_STATE_HELPER"
	helperDirEnv = "KVROUTER_STATE_HELPER_DIR"
)

// helperMain is a child process: "lock" tries to open the dir (exit 3 if
// locked), "register" opens a registry and puts workers forever, printing
// each one once Put returned.
func helperMain(mode, path string) int {
	d, err := OpenDir(DirConfig{Path: path})
	if err != nil {
		fmt.Println(err)
		if errors.Is(err, ErrLocked) {
			return 3
		}
		return 1
	}
	switch mode {
	case "lock":
		return 0
	case "register":
		reg, _, err := OpenRegistry(RegistryConfig{Dir: d})
		if err != nil {
			fmt.Println(err)
			return 1
		}
		for i := 0; ; i++ {
			if err := reg.Put(testWorker(i)); err != nil {
				fmt.Println(err)
				return 1
			}
			fmt.Printf("ok %d\n", i)
		}
	}
	return 2
}

func openDir(t testing.TB, path string) *Dir {
	t.Helper()
	d, err := OpenDir(DirConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestDirLock: a second open of a held dir fails, in this process and in
// another, naming the dir; after Close it succeeds.
func TestDirLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "nested")
	d := openDir(t, path)
	_, err := OpenDir(DirConfig{Path: path})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "another router holds it") {
		t.Fatalf("second open: %v", err)
	}
	t.Log(err)

	out, err := helperCmd("lock", path).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(out), path) {
		t.Fatalf("child open: %v: %s", err, out)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("x", func(io.Writer) error { return nil }); err == nil {
		t.Fatal("write after close: no error")
	}
	if out, err := helperCmd("lock", path).CombinedOutput(); err != nil {
		t.Fatalf("child open after close: %v: %s", err, out)
	}
	d2 := openDir(t, path)
	d2.Close()
}

// helperCmd runs this test binary as a helper process (see helperMain).
func helperCmd(mode, path string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperDirEnv+"="+path)
	return cmd
}

// TestDirRemovesTemps: files a crashed write left are removed on open,
// others kept.
func TestDirRemovesTemps(t *testing.T) {
	path := t.TempDir()
	for _, n := range []string{"registry.log.123.tmp", "keep.me", "snapshot-1.kvs.bad-7"} {
		os.WriteFile(filepath.Join(path, n), []byte("x"), 0o644)
	}
	openDir(t, path)
	ents, _ := os.ReadDir(path)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "LOCK keep.me snapshot-1.kvs.bad-7" {
		t.Fatalf("left %s", got)
	}
}

// TestWriteFileFailure: a failing fill or a full disk leaves the old file
// as it was and no temp file; success replaces it.
func TestWriteFileFailure(t *testing.T) {
	var full DiskFull
	path := t.TempDir()
	d, err := OpenDir(DirConfig{Path: path, WriteHook: full.Hook()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	if err := d.WriteFile("f", write("old")); err != nil {
		t.Fatal(err)
	}
	full.Full.Store(true)
	err = d.WriteFile("f", write(strings.Repeat("new", 100000)))
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), filepath.Join(path, "f")) {
		t.Fatalf("full disk: %v", err)
	}
	full.Full.Store(false)
	boom := errors.New("boom")
	if err := d.WriteFile("f", func(io.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("fill error: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(path, "f")); string(b) != "old" {
		t.Fatalf("old file now %q", b)
	}
	if ents, _ := os.ReadDir(path); len(ents) != 2 {
		t.Fatalf("%d files left", len(ents))
	}
	if err := d.WriteFile("f", write("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(path, "f")); string(b) != "new" {
		t.Fatalf("file now %q", b)
	}
}

// TestMoveAside: names are unique.
func TestMoveAside(t *testing.T) {
	d := openDir(t, t.TempDir())
	var moved []string
	for range 3 {
		os.WriteFile(d.file("x"), nil, 0o644)
		to, err := d.MoveAside("x")
		if err != nil {
			t.Fatal(err)
		}
		moved = append(moved, to)
	}
	if moved[0] == moved[1] || moved[1] == moved[2] || !strings.Contains(moved[0], "x.bad-") {
		t.Fatalf("moved to %v", moved)
	}
}
