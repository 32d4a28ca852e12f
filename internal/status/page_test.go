package status

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, h http.Handler, method string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/status", nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestPageHeadersAndMethods(t *testing.T) {
	h := NewHandler(PageConfig{Source: SourceFunc(fixtureRanks), Log: fixtureLog(), Refresh: 5 * time.Second,
		Now: func() time.Time { return fixtureNow }})
	res, body := get(t, h, http.MethodGet)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q: want default-src 'none'", csp)
	}
	for _, want := range []string{`<meta http-equiv="refresh" content="5">`, `data-worker="sglang-d"`, "req-7005"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, ext := range []string{"http://", "https://", "<script", "<link", "src="} {
		if strings.Contains(body, ext) {
			t.Errorf("page contains %q: it must reference nothing outside itself", ext)
		}
	}
	if res, _ := get(t, h, http.MethodPost); res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d, Allow %q", res.StatusCode, res.Header.Get("Allow"))
	}
}

// Names come from registrations and requests: the page escapes them.
func TestPageEscapes(t *testing.T) {
	evil := `<script>alert(1)</script>`
	l := NewDecisionLog(LogConfig{})
	l.Add(&Decision{Time: fixtureNow, WorkerID: evil, RequestID: evil, Model: evil, RandomMatched: -1},
		[]Candidate{{WorkerID: evil}})
	h := NewHandler(PageConfig{Log: l, Now: func() time.Time { return fixtureNow },
		Source: SourceFunc(func() []Rank {
			return []Rank{{Worker: evil, Model: evil, Problems: []Problem{{Reason: evil, Detail: evil}}}}
		})})
	_, body := get(t, h, http.MethodGet)
	if strings.Contains(body, "<script") {
		t.Fatal("a name reached the page unescaped")
	}
	if !strings.Contains(body, "&lt;script&gt;") {
		t.Fatal("the escaped name is missing")
	}
}

// With no workers and no log the page says so rather than drawing empty
// tables.
func TestPageEmpty(t *testing.T) {
	h := NewHandler(PageConfig{Source: SourceFunc(func() []Rank { return nil })})
	_, body := get(t, h, http.MethodGet)
	if !strings.Contains(body, `id="ranks-empty"`) || strings.Contains(body, `id="sparkline"`) {
		t.Fatalf("empty page:\n%s", body)
	}
	h = NewHandler(PageConfig{Source: SourceFunc(func() []Rank { return nil }), Log: NewDecisionLog(LogConfig{})})
	_, body = get(t, h, http.MethodGet)
	if !strings.Contains(body, `id="decisions-empty"`) || !strings.Contains(body, `id="gain">–<`) {
		t.Fatalf("page with an empty log:\n%s", body)
	}
}
