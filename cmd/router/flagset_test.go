package main

import (
	"flag"
	"testing"

	"github.com/kvrouter/kvrouter/internal/app"
)

// TestFlagSetIsApps: the command's flags are app.Config's and its own
// --config and --version, no more: internal/docgen documents exactly that
// set in docs/configuration.md.
func TestFlagSetIsApps(t *testing.T) {
	var path string
	var version bool
	cfg := app.DefaultConfig()
	cmd := newFlagSet(&cfg, &path, &version)
	appCfg := app.DefaultConfig()
	appFS := flag.NewFlagSet("app", flag.ContinueOnError)
	appCfg.RegisterFlags(appFS)
	want := map[string]bool{"config": true, "version": true}
	appFS.VisitAll(func(f *flag.Flag) { want[f.Name] = true })
	cmd.VisitAll(func(f *flag.Flag) {
		if !want[f.Name] {
			t.Errorf("--%s is cmd/router's own: add it to internal/docgen's routerFlags", f.Name)
		}
		delete(want, f.Name)
	})
	for n := range want {
		t.Errorf("--%s is not a flag of cmd/router", n)
	}
}
