package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/kvrouter/kvrouter/bench/sweep"
)

// runReport re-renders a finished sweep from its sweep.json: the table and
// the targets (sweep.Report.WriteTargets), judged by this build's arithmetic.
func runReport(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("kvbench report", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: kvbench report SWEEP_JSON: the table and targets of a kvbench sweep's sweep.json")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("report: want one sweep.json, got %d arguments", fs.NArg())
	}
	rep, err := sweep.ReadJSON(fs.Arg(0))
	if err != nil {
		return err
	}
	return rep.WriteMarkdown(out)
}
