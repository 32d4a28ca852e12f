// Command kvrouter routes LLM inference requests to the worker whose KV cache
// holds the longest prefix of the prompt. See docs/configuration.md for flags
// and docs/api.md for the API.
// It parses the flags and the config file, handles signals and runs
// internal/app, which holds the router's wiring.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvrouter/kvrouter/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // the usage is printed
		}
		fmt.Fprintln(os.Stderr, "kvrouter:", err)
		os.Exit(1)
	}
}

// errVersion stops run after --version is printed.
var errVersion = errors.New("version printed")

// run starts the router and serves until ctx is done.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(args, stderr)
	if errors.Is(err, errVersion) {
		fmt.Fprintln(stdout, app.BuildVersion())
		return nil
	}
	if err != nil {
		return err
	}
	a, err := app.New(cfg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// loadConfig builds the configuration from defaults, the --config file and
// the flags set in args: the flags are parsed twice, first to find
// --config (and --version), then over the file's values.
func loadConfig(args []string, stderr io.Writer) (app.Config, error) {
	var path string
	var version bool
	scratch := app.DefaultConfig()
	probe := newFlagSet(&scratch, &path, &version)
	probe.SetOutput(io.Discard)
	if err := probe.Parse(args); err != nil {
		path = "" // reported with the usage through the real flag set below
	} else if version {
		return app.Config{}, errVersion
	}
	cfg := app.DefaultConfig()
	if path != "" {
		if err := cfg.ReadFile(path); err != nil {
			return app.Config{}, err
		}
	}
	fs := newFlagSet(&cfg, &path, &version)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return app.Config{}, err
	}
	if fs.NArg() > 0 {
		return app.Config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return cfg, cfg.Validate()
}

// newFlagSet is the command's flags: --config, --version and c's.
func newFlagSet(c *app.Config, path *string, version *bool) *flag.FlagSet {
	fs := flag.NewFlagSet("kvrouter", flag.ContinueOnError)
	fs.StringVar(path, "config", "", "YAML config file (flags override it)")
	fs.BoolVar(version, "version", false, "print the version and exit")
	c.RegisterFlags(fs)
	return fs
}
