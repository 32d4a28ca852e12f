package docgen

import (
	"flag"
	"strings"
)

// Flag is one command-line flag as the documentation shows it.
type Flag struct {
	Name, Default, Usage string
}

// Flags lists fs's flags by name. defaults replaces, by flag name, a default
// that depends on the machine (a hostname, a home directory) with how the
// documentation describes it.
func Flags(fs *flag.FlagSet, defaults map[string]string) []Flag {
	var out []Flag
	fs.VisitAll(func(f *flag.Flag) {
		def := f.DefValue
		if d, ok := defaults[f.Name]; ok {
			def = d
		}
		out = append(out, Flag{Name: f.Name, Default: def, Usage: f.Usage})
	})
	return out
}

// FlagTable renders flags as a Markdown table: flag, default, meaning.
func FlagTable(flags []Flag) string {
	var b strings.Builder
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	for _, f := range flags {
		def := ""
		if f.Default != "" {
			def = code(f.Default)
		}
		b.WriteString("| " + code("--"+f.Name) + " | " + def + " | " + cell(f.Usage) + " |\n")
	}
	return b.String()
}

// code is s as Markdown inline code, with a longer fence when s holds a
// backtick.
func code(s string) string {
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}

// cell escapes what would end a table cell or row.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
