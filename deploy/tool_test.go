package deploy_test

import (
	"os"
	"os/exec"
	"testing"
)

// needTool returns the path of an external program a test drives. Where it
// is missing the test is skipped, saying how to get it, except under CI
// (CI set), whose .ci/run installs it: there a missing tool fails.
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s not on PATH under CI: .ci/run installs Debian's %s", name, pkg)
	}
	t.Skipf("%s not on PATH (apt-get install %s; .ci/run installs it)", name, pkg)
	return ""
}
