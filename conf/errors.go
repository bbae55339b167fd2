package conf

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem in a configuration file.
type Error struct {
	File string // the file name given to Parse or Load
	Line int    // 1-based; 0 when the problem has no single place (a missing key)
	Path string // dotted path such as pools[0].timeouts.dial; empty for the document
	Msg  string // what is wrong; never contains a secret
}

// Error formats the problem as "file:line: path: message".
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		b.WriteString("line " + strconv.Itoa(e.Line) + ": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a configuration, sorted by line. Parse,
// Load and Validate return it (as *Errors) so that an operator fixes the
// whole file in one pass.
type Errors struct {
	List []*Error
}

// Error lists the problems, one per line.
func (e *Errors) Error() string {
	lines := make([]string, len(e.List))
	for i, x := range e.List {
		lines[i] = x.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the individual problems, for errors.As.
func (e *Errors) Unwrap() []error {
	out := make([]error, len(e.List))
	for i, x := range e.List {
		out[i] = x
	}
	return out
}

// sortErrors orders by line (document-level problems first), keeps the
// order of discovery among equals and drops exact repeats, which merge keys
// can produce.
func sortErrors(list []*Error) []*Error {
	slices.SortStableFunc(list, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
	out := list[:0]
	seen := make(map[Error]bool, len(list))
	for _, e := range list {
		if !seen[*e] {
			seen[*e] = true
			out = append(out, e)
		}
	}
	return out
}

// asError returns nil for an empty list, so that a nil *Errors never hides
// inside a non-nil error interface.
func asError(list []*Error) error {
	if len(list) == 0 {
		return nil
	}
	return &Errors{List: sortErrors(list)}
}
