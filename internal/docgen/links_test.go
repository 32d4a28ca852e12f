package docgen_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pendingDocs are documents other changes in flight add, which these
// documents already link to. PENDING: an entry whose file exists fails
// TestDocLinks, so the list empties itself at merge.
var pendingDocs = map[string]bool{}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#+ (.+)$`)
	fenceRE   = regexp.MustCompile("(?s)```.*?```")
)

// slug is GitHub's anchor for a heading.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(string(b), ""), -1) {
		out[slug(m[1])] = true
	}
	return out
}

// TestDocLinks: every relative link of the user documentation names a file
// of the repository (or one pending), and every #anchor into a Markdown
// file names one of its headings.
func TestDocLinks(t *testing.T) {
	const root = "../.."
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"README.md", "bench/README.md", "examples/README.md"} {
		files = append(files, filepath.Join(root, f))
	}
	for p := range pendingDocs {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s exists now: remove it from pendingDocs", p)
		}
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := f
			if file != "" {
				dest = filepath.Join(filepath.Dir(f), file)
			}
			rel, _ := filepath.Rel(root, dest)
			if pendingDocs[filepath.ToSlash(rel)] {
				continue
			}
			checked++
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s links to %s: no such file", f, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !anchors(t, dest)[anchor] {
				t.Errorf("%s links to %s: no heading with anchor #%s", f, target, anchor)
			}
		}
	}
	if checked < 30 {
		t.Fatalf("only %d links checked", checked)
	}
}

// TestReadme: the README stays a user's entry point: short, and linking
// every document of docs/ (and those pending).
func TestReadme(t *testing.T) {
	const root = "../.."
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(b); n > 25000 {
		t.Errorf("README.md is %d bytes; keep it under 25,000 and move detail to docs/", n)
	}
	linked := map[string]bool{}
	for _, m := range linkRE.FindAllStringSubmatch(string(b), -1) {
		file, _, _ := strings.Cut(m[1], "#")
		linked[filepath.ToSlash(filepath.Clean(file))] = true
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, d := range docs {
		want["docs/"+filepath.Base(d)] = true
	}
	for p := range pendingDocs {
		want[p] = true
	}
	for d := range want {
		if !linked[d] {
			t.Errorf("README.md does not link %s", d)
		}
	}
}
