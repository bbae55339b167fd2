package tls

import (
	"testing"
	"time"
)

func TestStapleRefreshAt(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		this, next time.Duration // relative to now
		want       time.Duration // refresh, relative to now
	}{
		{"half of a 4h validity", 0, 4 * time.Hour, 2 * time.Hour},
		{"capped at 12h for a week-long response", 0, 7 * 24 * time.Hour, 12 * time.Hour},
		{"not sooner than a minute", -time.Hour, 10 * time.Minute, time.Minute},
		{"half the remaining time when under a minute is left", 0, time.Minute, 30 * time.Second},
		{"never below 5s", -time.Minute, 2 * time.Second, 5 * time.Second},
		{"no NextUpdate: 24h validity", 0, 0, 12 * time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &staple{thisUpdate: now.Add(tc.this)}
			if tc.next != 0 {
				s.nextUpdate = now.Add(tc.next)
			}
			if got := s.refreshAt(now).Sub(now); got != tc.want {
				t.Errorf("refresh in %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		n      int
		lo, hi time.Duration
	}{
		{1, 45 * time.Second, 75 * time.Second},
		{2, 90 * time.Second, 150 * time.Second},
		{5, 12 * time.Minute, 20 * time.Minute},
		{30, 45 * time.Minute, 75 * time.Minute},
	}
	for _, tc := range tests {
		for range 50 {
			if got := backoff(tc.n); got < tc.lo || got > tc.hi {
				t.Errorf("backoff(%d) = %v, want within [%v, %v]", tc.n, got, tc.lo, tc.hi)
			}
		}
	}
}
