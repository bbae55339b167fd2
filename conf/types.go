package conf

import (
	"fmt"
	"log/slog"
	"time"
)

// Duration is a time.Duration written in the file as a Go duration string
// such as "500ms", "10s" or "1h30m". A bare 0 is accepted; other numbers
// without a unit are rejected so that "30" is never read as 30ns.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText formats d like time.Duration, so the YAML and JSON forms of a
// Config read back.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q: use Go syntax such as 500ms, 10s or 1h30m", b)
	}
	*d = Duration(v)
	return nil
}

// Secret is a string that is never printed: String, GoString, LogValue and
// the text, JSON and YAML encodings all yield "[redacted]" (or "" when the
// secret is empty, so an unset secret stays visible as unset).
type Secret string

const redacted = "[redacted]"

func (s Secret) masked() string {
	if s == "" {
		return ""
	}
	return redacted
}

// String returns "[redacted]".
func (s Secret) String() string { return s.masked() }

// GoString returns "[redacted]", for %#v.
func (s Secret) GoString() string { return `"` + s.masked() + `"` }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.masked()) }

// MarshalText returns "[redacted]"; it also covers JSON and YAML.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.masked()), nil }

var (
	_ fmt.Stringer   = Secret("")
	_ fmt.GoStringer = Secret("")
	_ slog.LogValuer = Secret("")
)
