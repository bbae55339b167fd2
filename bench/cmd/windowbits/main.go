// Command windowbits measures what permessage-deflate window caps save a
// Go backend: it starts the echo backend (edge-backend -deflate,
// gorilla/websocket) once per offer, opens -conns connections to it that
// offer permessage-deflate with the window parameters edge sends under
// websocket.deflate_max_window_bits (9, 15, or none), echoes one
// compressed 1 KiB message on each, and prints the backend's RSS per
// connection once they are idle, with the extension answer it gave.
//
//	bench/out/bin/windowbits -backend-bin bench/out/bin/edge-backend -conns 2000 -bits 0,9,15
package main

import (
	"bufio"
	"bytes"
	"compress/flate"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/edgelb/edge/bench/internal/procfs"
)

func main() {
	bin := flag.String("backend-bin", "bench/out/bin/edge-backend", "echo backend binary")
	conns := flag.Int("conns", 2000, "connections per offer")
	bitsList := flag.String("bits", "0,9,15", "window caps to offer (0: permessage-deflate; client_max_window_bits, as browsers offer)")
	settle := flag.Duration("settle", 3*time.Second, "wait before the RSS reading")
	flag.Parse()
	for _, b := range strings.Split(*bitsList, ",") {
		bits, err := strconv.Atoi(b)
		if err != nil {
			fatal(err)
		}
		per, answer, err := measure(*bin, *conns, bits, *settle)
		if err != nil {
			fatal(err)
		}
		fmt.Printf("bits=%d conns=%d backend_kib_per_conn=%.2f answer=%q\n", bits, *conns, per, answer)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "windowbits:", err)
	os.Exit(1)
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func measure(bin string, n, bits int, settle time.Duration) (float64, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return 0, "", err
	}
	cmd := exec.Command(bin, "-listen", addr, "-id", "b", "-deflate")
	if err := cmd.Start(); err != nil {
		return 0, "", err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var c net.Conn
	for i := 0; i < 100; i++ { // until it listens
		if c, err = net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return 0, "", fmt.Errorf("backend did not listen: %w", err)
	}
	time.Sleep(settle)
	before, err := procfs.ReadRSS(cmd.Process.Pid)
	if err != nil {
		return 0, "", err
	}
	offer := "permessage-deflate; client_max_window_bits"
	if bits > 0 {
		offer = fmt.Sprintf("permessage-deflate; server_max_window_bits=%d; client_max_window_bits=%d", bits, bits)
	}
	msg := compressed(bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), 40)[:1024])
	var keep []net.Conn
	defer func() {
		for _, c := range keep {
			c.Close()
		}
	}()
	answer := ""
	for i := 0; i < n; i++ {
		c, ans, err := open(addr, offer, msg)
		if err != nil {
			return 0, "", fmt.Errorf("connection %d: %w", i, err)
		}
		answer = ans
		keep = append(keep, c)
	}
	time.Sleep(settle)
	after, err := procfs.ReadRSS(cmd.Process.Pid)
	if err != nil {
		return 0, "", err
	}
	return float64(after-before) / float64(n), answer, nil // ReadRSS is in KiB
}

// compressed is a masked client text frame of msg, compressed as RFC 7692
// §7.2.1 says (its distances stay within 26 bytes, inside any window).
func compressed(msg []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestSpeed)
	w.Write(msg)
	w.Flush()
	p := bytes.TrimSuffix(buf.Bytes(), []byte{0, 0, 0xff, 0xff})
	f := []byte{0x80 | 0x40 | 0x1, 0x80 | 126, byte(len(p) >> 8), byte(len(p))}
	if len(p) < 126 {
		f = []byte{0x80 | 0x40 | 0x1, 0x80 | byte(len(p))}
	}
	f = append(f, 1, 2, 3, 4)
	for i, b := range p {
		f = append(f, b^[]byte{1, 2, 3, 4}[i%4])
	}
	return f
}

func open(addr, offer string, msg []byte) (net.Conn, string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	var k [16]byte
	rand.Read(k[:])
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: b\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Extensions: %s\r\n\r\n",
		base64.StdEncoding.EncodeToString(k[:]), offer)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, "", err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		c.Close()
		return nil, "", fmt.Errorf("status %d", resp.StatusCode)
	}
	if _, err := c.Write(msg); err != nil {
		c.Close()
		return nil, "", err
	}
	// The echo: one frame, its header then its payload.
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		c.Close()
		return nil, "", err
	}
	l := int(h[1] & 0x7f)
	if l == 126 {
		var e [2]byte
		io.ReadFull(br, e[:])
		l = int(e[0])<<8 | int(e[1])
	}
	if _, err := io.CopyN(io.Discard, br, int64(l)); err != nil {
		c.Close()
		return nil, "", err
	}
	return c, resp.Header.Get("Sec-WebSocket-Extensions"), nil
}
