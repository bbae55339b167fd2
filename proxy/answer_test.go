package proxy

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/balance"
)

// TestRefusedAnswersHaveAWriteTimeout: a client that pipelines requests edge
// refuses itself (here 400 for a fragment, 421 for an unknown host, and
// OPTIONS *) and never reads the answers must not hold its socket for ever:
// once an answer cannot be written within the listener's AnswerTimeout,
// edge closes the connection, and the client's writes fail.
func TestRefusedAnswersHaveAWriteTimeout(t *testing.T) {
	for _, req := range []string{
		"GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: nowhere.example\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		t.Run(strings.Fields(req)[0]+" "+strings.Fields(req)[1], func(t *testing.T) {
			p := newPool(t, "app", balance.LeastConn, map[string]string{"b": "127.0.0.1:9"})
			e := startEdge(t, edgeConfig{
				opts: Options{Routes: []Route{{Hosts: []string{"x"}, Pool: p}}},
				lo:   ListenerOptions{AnswerTimeout: 200 * time.Millisecond},
			})
			d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
				// A small receive buffer: the answers back up quickly.
				return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
			}}
			c, err := d.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			batch := []byte(strings.Repeat(req, 512))
			// Bounded: edge must give up long before the client's own
			// deadline; a timeout here means it never did.
			_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			for {
				if _, err := c.Write(batch); err != nil {
					if errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatal("edge kept the connection of a client that never reads its answers")
					}
					return // reset or broken pipe: edge closed it
				}
			}
		})
	}
}
