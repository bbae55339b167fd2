// Command wsclient is a small WebSocket client for trying edge by hand: it
// connects a number of times through the edge, sends a message on each
// connection and prints the answer. It keeps cookies between connections, so
// with cookie stickiness every connection lands on the same backend.
//
//	wsclient -n 5 -insecure wss://127.0.0.1:8443/        # which backend answered, 5 times
//	wsclient -msg headers -insecure wss://127.0.0.1:8443/ # what the backend received
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net/http/cookiejar"
	"net/url"
	"os"
	"time"

	"github.com/gorilla/websocket"
)

func main() {
	n := flag.Int("n", 1, "connections to open, one after another")
	msg := flag.String("msg", "whoami", "text message to send on each connection")
	insecure := flag.Bool("insecure", false, "skip certificate verification (self-signed demo certificate)")
	cafile := flag.String("cacert", "", "PEM file of the CA to trust")
	nocookies := flag.Bool("no-cookies", false, "do not keep cookies between connections")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: wsclient [flags] ws[s]://host:port/path")
		os.Exit(2)
	}
	target := flag.Arg(0)
	u, err := url.Parse(target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad url:", err)
		os.Exit(2)
	}
	tc := &tls.Config{InsecureSkipVerify: *insecure} //nolint:gosec // opt-in flag for the demo certificate
	if *cafile != "" {
		pem, err := os.ReadFile(*cafile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tc.RootCAs = pool
	}
	d := websocket.Dialer{TLSClientConfig: tc, HandshakeTimeout: 10 * time.Second}
	if !*nocookies {
		jar, _ := cookiejar.New(nil)
		d.Jar = jar
	}
	failed := false
	for i := 0; i < *n; i++ {
		c, resp, err := d.Dial(target, nil)
		if err != nil {
			status := ""
			if resp != nil {
				status = " (" + resp.Status + ")"
			}
			fmt.Printf("%d: dial %s: %v%s\n", i+1, u.Host, err, status)
			failed = true
			continue
		}
		sticky := ""
		for _, ck := range resp.Cookies() {
			sticky = " set-cookie " + ck.Name
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte(*msg)); err != nil {
			fmt.Printf("%d: write: %v\n", i+1, err)
			failed = true
		} else if _, answer, err := c.ReadMessage(); err != nil {
			fmt.Printf("%d: read: %v\n", i+1, err)
			failed = true
		} else {
			fmt.Printf("%d: %s%s\n", i+1, answer, sticky)
		}
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		_ = c.Close()
	}
	if failed {
		os.Exit(1)
	}
}
