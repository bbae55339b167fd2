package main

import (
	"fmt"
	"io"
	"net/http"
	"time"
)

// probe is `edge -probe URL`: one GET with a short timeout, exit 0 on a 2xx
// answer and 1 otherwise. Distroless images have no curl or wget, so the
// container's HEALTHCHECK runs edge itself against its admin listener.
func probe(url string, stderr io.Writer) int {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(stderr, "edge: probe:", err)
		return 1
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(stderr, "edge: probe %s: %s\n", url, resp.Status)
		return 1
	}
	return 0
}
