package attack

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestBoundLog: the bound address of a worker's rank is read from the
// router's text or JSON log, whatever the writes' boundaries, and the log
// still reaches the next writer unchanged.
func TestBoundLog(t *testing.T) {
	var out bytes.Buffer
	b := newBoundLog(&out)
	log := `time=x level=INFO msg="kv events: bound; waiting for the engine to connect" worker=hostile-1 dp_rank=0 endpoint=@tcp://127.0.0.1:0 listening=127.0.0.1:41234` + "\n" +
		`{"msg":"kv events: bound","worker":"hostile-2","listening":"127.0.0.1:5557"}` + "\n" +
		`time=x level=INFO msg="kvrouter listening" grpc=127.0.0.1:1 http=127.0.0.1:2` + "\n"
	for i := 0; i < len(log); i += 7 {
		if _, err := b.Write([]byte(log[i:min(i+7, len(log))])); err != nil {
			t.Fatal(err)
		}
	}
	if out.String() != log {
		t.Fatalf("next writer got %q", out.String())
	}
	for worker, want := range map[string]string{"hostile-1": "127.0.0.1:41234", "hostile-2": "127.0.0.1:5557"} {
		if got, err := b.wait(context.Background(), worker, time.Minute); err != nil || got != want {
			t.Errorf("wait(%s) = %q, %v; want %q", worker, got, err, want)
		}
	}
	if got, err := b.wait(context.Background(), "never", time.Millisecond); err == nil {
		t.Errorf("wait for a worker never logged = %q; want an error", got)
	}
	// A worker logged after the wait began wakes it.
	done := make(chan string)
	go func() {
		got, _ := b.wait(context.Background(), "late", time.Minute)
		done <- got
	}()
	_, _ = b.Write([]byte("worker=late listening=127.0.0.1:9\n"))
	if got := <-done; got != "127.0.0.1:9" {
		t.Errorf("late worker: %q", got)
	}
}
