package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvrouter/kvrouter/bench/attack"
)

// parseAttack parses `kvbench attack` flags.
func parseAttack(args []string) (attack.Config, bool, string, error) {
	fs := flag.NewFlagSet("kvbench attack", flag.ContinueOnError)
	var (
		c         attack.Config
		routerArg string
		only      string
		jsonOut   bool
		logPath   string
	)
	fs.StringVar(&c.RouterBin, "router-bin", "bin/kvrouter", "router binary")
	fs.StringVar(&routerArg, "router-args", "", "extra router flags, space-separated (after the suite's own)")
	fs.IntVar(&c.MaxActive, "max-active-requests", 1000, "router --max-active-requests (small, so the Route flood reaches it)")
	fs.IntVar(&c.MaxWorkers, "max-workers", 256, "router --max-workers (small, so the registration flood reaches it)")
	fs.IntVar(&c.Engines, "engines", 2, "honest simulated engines")
	fs.StringVar(&c.Model, "model", "bench-model", "model name")
	fs.BoolVar(&c.Short, "short", false, "each attack small and quick (about 30 s in all)")
	fs.StringVar(&only, "only", "", "attacks to run, comma-separated (default all): "+strings.Join(attack.Names(), ","))
	fs.BoolVar(&jsonOut, "json", false, "print the results as JSON instead of a table")
	fs.StringVar(&logPath, "router-log", "", "write the router's output to this file")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the prompts")
	if err := fs.Parse(args); err != nil {
		return c, false, "", err
	}
	if fs.NArg() > 0 {
		return c, false, "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.RouterArgs = strings.Fields(routerArg)
	if only != "" {
		c.Only = strings.Split(only, ",")
	}
	if c.Short {
		c.Engines = min(c.Engines, 1)
		if !flagSet(fs, "max-active-requests") {
			c.MaxActive = 200
		}
		if !flagSet(fs, "max-workers") {
			c.MaxWorkers = 64
		}
	}
	return c, jsonOut, logPath, nil
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func runAttack(ctx context.Context, args []string) error {
	cfg, jsonOut, logPath, err := parseAttack(args)
	if err != nil {
		return err
	}
	cfg.Progress = os.Stderr
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.RouterLog = f
	}
	rep, err := attack.Run(ctx, cfg)
	if rep != nil {
		if jsonOut {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			if jerr := enc.Encode(rep); jerr != nil {
				return jerr
			}
		} else {
			writeAttackTable(os.Stdout, rep)
		}
	}
	if err != nil {
		return err
	}
	if !rep.Passed() {
		return fmt.Errorf("%d attack(s) failed", countFailed(rep))
	}
	return nil
}

func countFailed(rep *attack.Report) int {
	n := 0
	for _, r := range rep.Results {
		if !r.Pass {
			n++
		}
	}
	return n
}

// writeAttackTable prints one row per attack, then what each did and why
// any failed.
func writeAttackTable(w io.Writer, rep *attack.Report) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
	fmt.Fprintf(w, "| attack | RSS growth | CPU s | honest Route p99 before / during | honest Score max (bad/calls) | exact after | verdict |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Results {
		verdict := "PASS"
		if !r.Pass {
			verdict = "FAIL"
		}
		exact := "yes"
		if !r.Exact {
			exact = "no"
		}
		fmt.Fprintf(w, "| %s | %s | %.2f | %s / %s | %s (%d/%d) | %s | %s |\n", r.Name, attack.Bytes(r.RSSGrowth), r.CPUSec,
			ms(r.RouteP99Before), ms(r.RouteP99During), ms(r.ScoreMax), r.ScoreSlow+r.ScoreWrong+r.ScoreFailed, r.ScoreCalls, exact, verdict)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%s (%s)\n", r.Name, r.Outcome, r.Duration)
		for _, f := range r.Failures {
			fmt.Fprintf(tw, "\tFAIL: %s\n", f)
		}
	}
	tw.Flush()
}
