package docgen

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoSection is returned when a document lacks a section's markers, or
// has them out of order or more than once.
var ErrNoSection = errors.New("docgen: generated section markers missing or malformed")

func markers(name string) (begin, end string) {
	return "<!-- BEGIN GENERATED " + name + " -->\n", "<!-- END GENERATED " + name + " -->"
}

// bounds finds the body of section name in doc: [i, j).
func bounds(doc, name string) (int, int, error) {
	begin, end := markers(name)
	if strings.Count(doc, begin) != 1 || strings.Count(doc, end) != 1 {
		return 0, 0, fmt.Errorf("%w: %q", ErrNoSection, name)
	}
	i := strings.Index(doc, begin) + len(begin)
	j := strings.Index(doc, end)
	if j < i {
		return 0, 0, fmt.Errorf("%w: %q ends before it begins", ErrNoSection, name)
	}
	return i, j, nil
}

// Section returns the body of section name in doc.
func Section(doc, name string) (string, error) {
	i, j, err := bounds(doc, name)
	if err != nil {
		return "", err
	}
	return doc[i:j], nil
}

// Splice returns doc with section name's body replaced by body.
func Splice(doc, name, body string) (string, error) {
	i, j, err := bounds(doc, name)
	if err != nil {
		return "", err
	}
	return doc[:i] + body + doc[j:], nil
}
