package status

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// chromium returns the browser the page tests drive: Debian's chromium.
// Missing, the test is skipped saying so, except under CI (CI set), whose
// .ci/run installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not on PATH under CI: .ci/run installs Debian's chromium")
	}
	t.Skip("chromium not on PATH (apt-get install chromium; .ci/run installs it)")
	return ""
}

// TestPageInBrowser renders the page in headless Chromium and checks what it
// shows: the ranks' states, the gain figures and sparkline, the decisions
// with their cost terms, styles applied, and nothing fetched but the page.
// It saves a screenshot in the test's artifact directory (go test
// -artifacts -outputdir DIR keeps it).
func TestPageInBrowser(t *testing.T) {
	exe := chromium(t)
	srv := httptest.NewServer(NewHandler(PageConfig{
		Source: SourceFunc(fixtureRanks), Log: fixtureLog(), Now: func() time.Time { return fixtureNow },
	}))
	defer srv.Close()

	actx, cancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 1000),
		chromedp.UserDataDir(t.TempDir()))...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	var mu sync.Mutex
	var requested []string
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			mu.Lock()
			requested = append(requested, e.Request.URL)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/status"), chromedp.WaitVisible(chromedp.CSS("#decisions"))); err != nil {
		t.Fatal(err)
	}
	run := func(a chromedp.Action[string]) string {
		t.Helper()
		v, err := chromedp.Run(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cells := func(sel string) [][]string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](`Array.from(document.querySelectorAll(`+"`"+sel+"`"+
			`)).map(tr => Array.from(tr.children).map(td => td.innerText.trim()))`))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	js := func(expr string) string { return run(chromedp.Evaluate[string](expr)) }
	width := func(id string) float64 {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.getElementById("`+id+`").getBBox().width`))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	title := run(chromedp.Title())
	ranks := cells("#ranks > tbody > tr")
	decisions := cells("#decisions > tbody > tr.decision")
	summary, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](
		`Object.fromEntries(["n-workers","n-connected","n-inexact","n-problems","gain"].map(id => [id, document.getElementById(id).innerText]))`))
	if err != nil {
		t.Fatal(err)
	}
	hitRate, rrRate, gain := run(chromedp.Text(chromedp.CSS("#hit-rate"))), run(chromedp.Text(chromedp.CSS("#rr-rate"))), run(chromedp.Text(chromedp.CSS("#gain")))
	hitWidth, rrWidth := width("hit-line"), width("rr-line")
	warnColor := js(`getComputedStyle(document.querySelector('#ranks tr[data-worker="vllm-b"] td.state')).color`)
	badColor := js(`getComputedStyle(document.querySelector('#ranks tr[data-worker="vllm-c"] td.bad')).color`)
	chosenWeight := js(`getComputedStyle(document.querySelector('#decisions tr.decision table.cands tr.chosen td')).fontWeight`)
	candidates := js(`document.querySelector('#decisions tr.decision table.cands').innerText`)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.ArtifactDir(), "status.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))

	if title != "kvrouter status" {
		t.Errorf("title %q", title)
	}
	want := map[string]string{"n-workers": "4", "n-connected": "4 / 5", "n-inexact": "1", "n-problems": "1", "gain": gain}
	for k, v := range want {
		if summary[k] != v {
			t.Errorf("summary %s = %q, want %q", k, summary[k], v)
		}
	}
	// Columns: worker, rank, model, connected, last seq, lag, cached, capacity, state, problems.
	if len(ranks) != 5 {
		t.Fatalf("%d rank rows, want 5: %q", len(ranks), ranks)
	}
	checkRow := func(i int, col int, want string) {
		t.Helper()
		if got := ranks[i][col]; !strings.Contains(got, want) {
			t.Errorf("rank row %d (%s/%s) column %d = %q, want it to contain %q", i, ranks[i][0], ranks[i][1], col, got, want)
		}
	}
	checkRow(0, 3, "yes")
	checkRow(0, 4, "18231")
	checkRow(0, 5, "4.2 ms")
	checkRow(0, 6, "3120")
	checkRow(0, 7, "4096")
	checkRow(0, 8, "ok")
	checkRow(2, 8, "inexact since seq 8811 (restore: rebuilt)")
	checkRow(3, 3, "no")
	checkRow(3, 8, "disconnected")
	checkRow(3, 7, "–")
	checkRow(4, 5, "–")
	checkRow(4, 8, "refusing events")
	checkRow(4, 9, "block_size_mismatch × 37: engine block size 32, registered 16")
	if warnColor != "rgb(160, 90, 0)" || badColor != "rgb(179, 38, 30)" {
		t.Errorf("state colours %q (inexact), %q (disconnected): the inline styles did not apply", warnColor, badColor)
	}

	// The gain: 84 busy intervals of 4 decisions, hits climbing to 80%, round robin ~27%.
	if !strings.HasSuffix(gain, "×") || gain == "–" || hitRate == "–" || rrRate == "–" {
		t.Errorf("gain %q, hit rate %q, round robin %q: want figures", gain, hitRate, rrRate)
	}
	if hitWidth < 500 || rrWidth < 500 {
		t.Errorf("sparkline lines %v and %v wide, want them across most of the 600", hitWidth, rrWidth)
	}

	// Decisions, newest first, with their candidates' cost terms (4 kept, 1 omitted).
	if len(decisions) != 12 {
		t.Fatalf("%d decision rows, want 12", len(decisions))
	}
	d0 := decisions[0]
	for col, want := range map[int]string{1: "llama-3-8b", 2: "req-7005", 3: "vllm-a/1", 4: "cache", 5: "25 / 32", 6: "10.5", 7: "21.00"} {
		if !strings.Contains(d0[col], want) {
			t.Errorf("newest decision column %d = %q, want %q", col, d0[col], want)
		}
	}
	for _, want := range []string{"vllm-a/1\t25\t7.00\t14.50\t21.00", "vllm-b/0\t12\t20.00\t9.25\t29.25", "sglang-d/0"} {
		if !strings.Contains(candidates, want) {
			t.Errorf("candidates %q lack %q", candidates, want)
		}
	}
	if strings.Contains(candidates, "vllm-e") || !strings.Contains(d0[8], "and 1 more") {
		t.Errorf("candidates cell %q: want 4 kept and 1 more counted", d0[8])
	}
	if chosenWeight != "600" {
		t.Errorf("chosen candidate's font weight %q, want 600", chosenWeight)
	}
	if got := decisions[1][4]; got != "sampled" {
		t.Errorf("second decision's reason %q, want sampled", got)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, u := range requested {
		if !strings.HasPrefix(u, srv.URL+"/") {
			t.Errorf("the page fetched %s: it must load nothing but itself", u)
		}
	}
	if len(requested) == 0 {
		t.Error("no request seen: the network listener checks nothing")
	}
}
