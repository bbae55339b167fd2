package proxy

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/edgelb/edge/balance"
)

// TestUpgradeStatus: every failure of the upgrade leg maps to one answer.
func TestUpgradeStatus(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		answer bool
	}{
		{fmt.Errorf("b: %w: %w", errClientGone, context.Canceled), 0, false},
		{errNoBackend(&pool{name: "p"}, balance.ErrNoBackend), http.StatusServiceUnavailable, true},
		{fmt.Errorf("%w: x", errLocalResource), http.StatusServiceUnavailable, true},
		{fmt.Errorf("b: %w", errBackendFull), http.StatusServiceUnavailable, true},
		{fmt.Errorf("%w: %w", errAnswerBroken, os.ErrDeadlineExceeded), http.StatusBadGateway, true},
		{fmt.Errorf("read: %w", os.ErrDeadlineExceeded), http.StatusGatewayTimeout, true},
		{fmt.Errorf("reset"), http.StatusBadGateway, true},
	} {
		if s, a := upgradeStatus(tc.err); s != tc.status || a != tc.answer {
			t.Errorf("%v: got %d %v, want %d %v", tc.err, s, a, tc.status, tc.answer)
		}
	}
}
