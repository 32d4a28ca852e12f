package replay

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// exitingRouter writes a script that counts its starts in a file and exits at
// once printing msg, the way a router that cannot bind exits.
func exitingRouter(t *testing.T, msg string) (bin, count string) {
	t.Helper()
	dir := t.TempDir()
	count = filepath.Join(dir, "starts")
	bin = filepath.Join(dir, "kvrouter")
	script := "#!/bin/sh\necho x >> " + count + "\necho '" + msg + "' >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, count
}

func starts(t *testing.T, count string) int {
	t.Helper()
	b, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "x")
}

func TestStartRouterRetriesATakenPort(t *testing.T) {
	bin, count := exitingRouter(t, "kvrouter: grpc listen 127.0.0.1:1: listen tcp 127.0.0.1:1: bind: address already in use")
	_, err := StartRouter(context.Background(), RouterConfig{Bin: bin, StartTimeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "exited during start") {
		t.Fatalf("err = %v", err)
	}
	if n := starts(t, count); n != portAttempts {
		t.Fatalf("started %d times, want %d", n, portAttempts)
	}
}

func TestStartRouterDoesNotRetryOtherFailures(t *testing.T) {
	bin, count := exitingRouter(t, "kvrouter: --policy: unknown")
	if _, err := StartRouter(context.Background(), RouterConfig{Bin: bin, StartTimeout: 10 * time.Second}); err == nil {
		t.Fatal("no error")
	}
	if n := starts(t, count); n != 1 {
		t.Fatalf("started %d times, want 1", n)
	}
}

func TestStartRouterDoesNotRetryGivenAddresses(t *testing.T) {
	bin, count := exitingRouter(t, "bind: address already in use")
	cfg := RouterConfig{Bin: bin, GRPCAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2", StartTimeout: 10 * time.Second}
	if _, err := StartRouter(context.Background(), cfg); err == nil {
		t.Fatal("no error")
	}
	if n := starts(t, count); n != 1 {
		t.Fatalf("started %d times, want 1", n)
	}
}
