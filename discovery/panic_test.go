package discovery

import (
	"reflect"
	"testing"

	"github.com/edgelb/edge/balance"
)

func ms(ids ...string) []balance.Member {
	var out []balance.Member
	for _, id := range ids {
		out = append(out, balance.Member{ID: id, Addr: id + ":1", Weight: 1})
	}
	return out
}

func TestApplyPanic(t *testing.T) {
	tests := []struct {
		name      string
		base      []balance.Member
		answer    []balance.Member
		threshold float64
		holding   bool
		want      []balance.Member
		wantPanic bool
	}{
		{"no base: anything goes", nil, ms("a"), 0.5, true, ms("a"), false},
		{"small drop accepted", ms("a", "b", "c", "d"), ms("a", "b"), 0.5, true, ms("a", "b"), false},
		{"drop below half held", ms("a", "b", "c", "d"), ms("a"), 0.5, true, ms("a", "b", "c", "d"), true},
		{"empty answer held", ms("a", "b"), nil, 0.5, true, ms("a", "b"), true},
		{"only member lost is held", ms("a"), nil, 0.5, true, ms("a"), true},
		{"new members join the held set", ms("a", "b", "c", "d"), ms("e"), 0.5, true, ms("a", "b", "c", "d", "e"), true},
		{"hold over: answer believed", ms("a", "b", "c", "d"), ms("a"), 0.5, false, ms("a"), false},
		{"threshold disabled", ms("a", "b", "c", "d"), nil, -1, true, nil, false},
		{"growth", ms("a"), ms("a", "b"), 0.5, true, ms("a", "b"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := applyPanic(tt.base, tt.answer, tt.threshold, tt.holding)
			if !reflect.DeepEqual(d.publish, tt.want) || d.panic != tt.wantPanic {
				t.Errorf("got %v panic=%v, want %v panic=%v", d.publish, d.panic, tt.want, tt.wantPanic)
			}
		})
	}
}

func TestApplyPanicAnswerWinsOnAddress(t *testing.T) {
	base := ms("a", "b", "c")
	answer := []balance.Member{{ID: "a", Addr: "moved:2", Weight: 5}}
	d := applyPanic(base, answer, 0.5, true)
	if !d.panic || d.publish[0] != answer[0] {
		t.Errorf("got %v panic=%v, want a first with the answer's address", d.publish, d.panic)
	}
}
