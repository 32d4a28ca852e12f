// Package docgen renders the reference tables of the documentation that
// must not drift from the code: the router's flags (docs/configuration.md)
// and the metrics it registers (docs/operations.md). A table lives between
// the markers <!-- BEGIN GENERATED name --> and <!-- END GENERATED name -->;
// TestDocsGenerated builds the router's real flag set (cmd/router's own
// flags and app.Config's) and its components' collectors as internal/app
// wires them, renders them, and fails when the documents differ (a flag or
// metric added undocumented, or a documented one gone).
// `go generate ./internal/docgen` rewrites the tables.
package docgen

//go:generate go test -count=1 -run ^TestDocsGenerated$ . -args -update
