package poolset

import (
	"testing"

	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/proxy"
)

// TestDeflateAndRateMapped: the file's deflate policy, window cap and
// rates reach the proxy's pool as written.
func TestDeflateAndRateMapped(t *testing.T) {
	pc := conf.DefaultPool()
	pc.Name = "chat"
	pc.WebSocket.MaxMessageBytes = 4 << 20
	pc.WebSocket.Deflate = conf.DeflateLimit
	pc.WebSocket.DeflateMaxWindowBits = 10
	pc.WebSocket.Rate = conf.MessageRate{MessagesPerSecond: 50, MessageBurst: 100, BytesPerSecond: 1 << 20, ByteBurst: 4 << 20, Action: conf.RateSlow}
	p := proxyPoolOf(&pc)
	if p.Deflate != proxy.DeflateLimit || p.DeflateMaxWindowBits != 10 {
		t.Fatalf("deflate %q bits %d, want limit and 10", p.Deflate, p.DeflateMaxWindowBits)
	}
	if p.RateMessages != 50 || p.RateMessageBurst != 100 || p.RateBytes != 1<<20 || p.RateByteBurst != 4<<20 || !p.RateSlow {
		t.Fatalf("rates %v %v %v %v slow %v", p.RateMessages, p.RateMessageBurst, p.RateBytes, p.RateByteBurst, p.RateSlow)
	}
	pc.WebSocket.Rate.Action = conf.RateClose
	if proxyPoolOf(&pc).RateSlow {
		t.Fatal("action close maps to RateSlow")
	}
}
