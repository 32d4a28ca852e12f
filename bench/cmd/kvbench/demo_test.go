package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
)

// TestEmbeddedDemoTrace checks that make run has a trace without ../shared/.
func TestEmbeddedDemoTrace(t *testing.T) {
	reqs, err := loadDemoTrace(filepath.Join(t.TempDir(), "missing.jsonl"), 300, 512, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 300 || len(reqs[0].HashIDs) == 0 {
		t.Fatalf("embedded trace: %d requests, first %+v; want 300", len(reqs), reqs[0])
	}
}
