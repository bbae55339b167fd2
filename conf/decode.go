package conf

import (
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// source remembers where each setting came from, so that checks made after
// decoding can still cite a line.
type source struct {
	file    string
	lines   map[string]int  // path -> line of its key (or list item)
	present map[string]bool // path -> set to something other than null
	bad     []string        // paths that failed to decode; their checks are skipped
}

// line returns the line of path or, when path was not in the file (a
// default), of its nearest ancestor that was.
func (s *source) line(path string) int {
	if s == nil {
		return 0
	}
	for path != "" {
		if l, ok := s.lines[path]; ok {
			return l
		}
		path = parent(path)
	}
	return 0
}

func (s *source) has(path string) bool { return s != nil && s.present[path] }

// parent strips the last ".key" or "[i]" from path.
func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

const (
	// maxNodes bounds the work of one decode, counting each node every time
	// an alias makes it reappear, so an alias bomb ends in an error.
	maxNodes = 500_000
	// maxMergeDepth bounds merge keys that merge mappings that merge
	// mappings, including a mapping that merges itself.
	maxMergeDepth = 16
)

var (
	durationType = reflect.TypeFor[Duration]()
	prefixType   = reflect.TypeFor[netip.Prefix]()
)

// decoder fills typed structs from a yaml.Node tree. Unlike yaml's own
// decoding it keeps going after a problem, knows the path and line of
// everything, and rejects what the schema does not name.
type decoder struct {
	src    *source
	errs   []*Error
	budget int
}

func newDecoder(file string) *decoder {
	return &decoder{
		src:    &source{file: file, lines: map[string]int{}, present: map[string]bool{}},
		budget: maxNodes,
	}
}

func (d *decoder) errorf(line int, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.src.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// fail records a problem with the value at path, whose own checks are then
// skipped by Validate.
func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.errorf(n.Line, path, format, args...)
	d.src.bad = append(d.src.bad, path)
}

// spend charges n nodes to the budget and reports whether it is exhausted.
func (d *decoder) spend(n int, line int) bool {
	if d.budget <= 0 {
		return true
	}
	d.budget -= n
	if d.budget <= 0 {
		d.errorf(line, "", "document too large: more than %d nodes after expanding aliases", maxNodes)
		return true
	}
	return false
}

// deref follows aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names the kind of a node for "expected X, got Y" messages. It
// never quotes the value, which might be a secret.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an unresolved alias"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "a string"
		case "!!int":
			return "an integer"
		case "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		case "!!null":
			return "null"
		case "!!timestamp":
			return "a timestamp"
		case "!!binary":
			return "binary data"
		}
		return "a value tagged " + strconv.Quote(n.Tag)
	}
	return "an unknown node"
}

// document decodes the top-level node of a file into c.
func (d *decoder) document(doc *yaml.Node, c *Config) {
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return
		}
		n = n.Content[0]
	}
	if isNull(deref(n)) {
		return // an empty file; Validate says what is missing
	}
	d.decode(n, reflect.ValueOf(c).Elem(), "")
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if d.spend(1, n.Line) {
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			d.fail(n, path, "alias *%s names no anchor", n.Value)
			return
		}
		n = deref(n)
	}
	if isNull(n) {
		return // same as absent: the default applies
	}
	switch v.Type() {
	case durationType:
		d.duration(n, v, path)
		return
	case prefixType:
		d.prefix(n, v, path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.mapping(n, v, path)
	case reflect.Slice:
		d.sequence(n, v, path)
	case reflect.String:
		if s, ok := d.str(n, path); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		d.boolean(n, v, path)
	case reflect.Int, reflect.Int64:
		d.integer(n, v, path)
	case reflect.Float64:
		d.float(n, v, path)
	default:
		panic("conf: no decoder for " + v.Type().String()) // a schema type this file forgot
	}
}

// field is one settable struct field and its YAML key.
type field struct {
	key   string
	index int
	def   string // the default tag
	hasDf bool
}

func fieldsOf(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		def, hasDf := f.Tag.Lookup("default")
		out = append(out, field{key: key, index: i, def: def, hasDf: hasDf})
	}
	return out
}

type pair struct{ key, val *yaml.Node }

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	fields := fieldsOf(v.Type())
	for _, p := range d.pairs(n, path, 0) {
		key := p.key.Value
		if path == "" && strings.HasPrefix(key, "x-") {
			continue // a place to define anchors, as in Docker Compose
		}
		i := -1
		for j := range fields {
			if fields[j].key == key {
				i = j
				break
			}
		}
		if i < 0 {
			names := make([]string, len(fields))
			for j := range fields {
				names[j] = fields[j].key
			}
			d.errorf(p.key.Line, path, "unknown key %q%s", key, suggest(key, names))
			continue
		}
		fpath := join(path, key)
		d.src.lines[fpath] = p.key.Line
		if !isNull(deref(p.val)) {
			d.src.present[fpath] = true
		}
		d.decode(p.val, v.Field(fields[i].index), fpath)
	}
}

// pairs lists the entries of a mapping, with merge keys ("<<: *anchor")
// expanded: keys written in the mapping win over merged ones, and earlier
// merged mappings win over later ones (YAML merge key spec).
func (d *decoder) pairs(n *yaml.Node, path string, depth int) []pair {
	if d.spend(len(n.Content)/2, n.Line) {
		return nil
	}
	var out []pair
	seen := map[string]int{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := deref(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k.Line, path, "keys must be plain strings, got %s", describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, val)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k.Line, join(path, k.Value), "duplicate key (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, pair{k, val})
	}
	for _, m := range merges {
		line := m.Line
		m = deref(m)
		var srcs []*yaml.Node
		switch m.Kind {
		case yaml.MappingNode:
			srcs = []*yaml.Node{m}
		case yaml.SequenceNode:
			for _, s := range m.Content {
				srcs = append(srcs, deref(s))
			}
		}
		for _, s := range srcs {
			if s.Kind != yaml.MappingNode {
				d.errorf(line, path, "merge key << takes a mapping or a list of mappings, got %s", describe(s))
				continue
			}
			if depth >= maxMergeDepth {
				d.errorf(line, path, "merge keys nested more than %d deep (does an anchor merge itself?)", maxMergeDepth)
				continue
			}
			for _, p := range d.pairs(s, path, depth+1) {
				if _, ok := seen[p.key.Value]; ok {
					continue
				}
				seen[p.key.Value] = p.key.Line
				out = append(out, p)
			}
		}
		if len(srcs) == 0 && m.Kind != yaml.SequenceNode {
			d.errorf(line, path, "merge key << takes a mapping or a list of mappings, got %s", describe(m))
		}
	}
	return out
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "expected a list, got %s", describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, c := range n.Content {
		p := index(path, i)
		d.src.lines[p] = c.Line
		d.src.present[p] = true
		d.decode(c, s.Index(i), p)
	}
	v.Set(s)
}

// str accepts any plain scalar but a boolean: min_version: 1.3 is meant as
// the string "1.3", but a boolean where a string is expected is a mistake
// worth naming.
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "expected a string, got %s", describe(n))
		return "", false
	}
	switch n.ShortTag() {
	case "!!str", "!!int", "!!float", "!!timestamp":
		return n.Value, true
	case "!!bool":
		d.fail(n, path, "expected a string, got a boolean (quote it if you mean the text)")
	default:
		d.fail(n, path, "expected a string, got %s", describe(n))
	}
	return "", false
}

func (d *decoder) boolean(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		d.fail(n, path, "expected true or false, got %s", describe(n))
		return
	}
	b, err := strconv.ParseBool(strings.ToLower(n.Value))
	if err != nil {
		d.fail(n, path, "expected true or false, got %q", n.Value)
		return
	}
	v.SetBool(b)
}

func (d *decoder) integer(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && strings.Trim(n.Value, "+-0123456789_") == "" {
		d.fail(n, path, "integer %s is out of range", n.Value) // too long for YAML to resolve as !!int
		return
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.fail(n, path, "expected an integer, got %s", describe(n))
		return
	}
	i, err := parseInt(n.Value)
	if err != nil || v.OverflowInt(i) {
		d.fail(n, path, "integer %s is out of range", n.Value)
		return
	}
	v.SetInt(i)
}

// parseInt reads the integer forms YAML 1.2 resolves: decimal with an
// optional sign, 0x, 0o and 0b prefixes, and underscores as separators.
// A leading zero is decimal, not octal.
func parseInt(s string) (int64, error) {
	s = strings.ReplaceAll(s, "_", "")
	neg := false
	switch {
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	base := 10
	if len(s) > 2 && s[0] == '0' {
		switch s[1] {
		case 'x', 'X':
			base, s = 16, s[2:]
		case 'o', 'O':
			base, s = 8, s[2:]
		case 'b', 'B':
			base, s = 2, s[2:]
		}
	}
	u, err := strconv.ParseUint(s, base, 64)
	if err != nil {
		return 0, err
	}
	if neg {
		if u > 1<<63 {
			return 0, strconv.ErrRange
		}
		return -int64(u), nil
	}
	if u > math.MaxInt64 {
		return 0, strconv.ErrRange
	}
	return int64(u), nil
}

func (d *decoder) float(n *yaml.Node, v reflect.Value, path string) {
	tag := n.ShortTag()
	if n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") {
		d.fail(n, path, "expected a number, got %s", describe(n))
		return
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	if tag == "!!int" && err != nil {
		var i int64
		i, err = parseInt(n.Value)
		f = float64(i)
	}
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		d.fail(n, path, "expected a finite number, got %q", n.Value)
		return
	}
	v.SetFloat(f)
}

func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "expected a duration such as \"10s\", got %s", describe(n))
		return
	}
	switch n.ShortTag() {
	case "!!str":
	case "!!int", "!!float":
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil && f == 0 {
			v.SetInt(0)
			return
		}
		d.fail(n, path, "duration %s has no unit: write e.g. \"%ss\" or \"%sms\"", n.Value, n.Value, n.Value)
		return
	default:
		d.fail(n, path, "expected a duration such as \"10s\", got %s", describe(n))
		return
	}
	t, err := time.ParseDuration(n.Value)
	if err != nil {
		hint := ""
		if strings.ContainsAny(n.Value, "dD") {
			hint = " (there is no day unit: use 24h)"
		}
		d.fail(n, path, "invalid duration %q: use Go syntax such as 500ms, 10s or 1h30m%s", n.Value, hint)
		return
	}
	v.SetInt(int64(t))
}

// prefix reads a CIDR; a bare address means a single host (/32 or /128).
// Host bits set after the slash are a mistake (10.1.0.0/8 probably meant
// 10.1.0.0/16), so they are rejected rather than silently masked.
func (d *decoder) prefix(n *yaml.Node, v reflect.Value, path string) {
	s, ok := d.str(n, path)
	if !ok {
		return
	}
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		p, err = netip.ParsePrefix(s)
		if err != nil {
			d.fail(n, path, "%q is not an address or CIDR such as 10.0.0.0/8", s)
			return
		}
		if p != p.Masked() {
			d.fail(n, path, "%q has bits set past the prefix length; did you mean %s?", s, p.Masked())
			return
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			d.fail(n, path, "%q is not an address or CIDR such as 10.0.0.0/8", s)
			return
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	v.Set(reflect.ValueOf(p))
}

// suggest proposes the known key closest to a mistyped one: same letters
// ignoring case and separators (readHeaderTimeout), or within two edits.
func suggest(key string, names []string) string {
	squash := func(s string) string { return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s)) }
	best, bestDist := "", 3
	for _, name := range names {
		if squash(name) == squash(key) {
			return fmt.Sprintf(" (did you mean %q?)", name)
		}
		if dist := editDistance(key, name); dist < bestDist {
			best, bestDist = name, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance, with a cap on input length so
// a huge key costs nothing.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
