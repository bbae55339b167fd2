package main

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgelb/edge/conf"
	"github.com/edgelb/edge/internal/consul"
	"github.com/edgelb/edge/internal/consultest"
	"github.com/edgelb/edge/internal/testbackend"
	"github.com/edgelb/edge/internal/testkit"
	"github.com/hashicorp/consul/api"
)

// registerBackend puts a test backend into Consul under service, as its
// own deploy tooling would, with an HTTP check Consul runs itself.
func registerBackend(t *testing.T, c *api.Client, service string, b *testbackend.Server, tags ...string) string {
	t.Helper()
	host, portStr, _ := net.SplitHostPort(b.Addr())
	port, _ := strconv.Atoi(portStr)
	id := service + "-" + b.ID
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: id, Name: service, Address: host, Port: port, Tags: tags,
		Check: &api.AgentServiceCheck{HTTP: "http://" + b.Addr() + "/whoami", Interval: "1s", Timeout: "1s", Status: api.HealthPassing},
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// consulSetup writes a config whose pool follows a Consul service.
func consulSetup(t *testing.T, agent *consultest.Agent, extra string) *setup {
	t.Helper()
	s := &setup{dir: t.TempDir(), wss: testkit.ClosedPort(t), ws: testkit.ClosedPort(t), admin: testkit.ClosedPort(t)}
	certFile, keyFile, roots := writeCert(t, s.dir)
	s.roots = roots
	s.cfg = filepath.Join(s.dir, "edge.yaml")
	body := fmt.Sprintf(`admin: {address: %q}
state_dir: state
drain: {window: 0s, timeout: 5s}
listeners:
  - {name: wss, address: %q, tls: {certificates: [{cert_file: %q, key_file: %q}]}}
  - {name: ws, address: %q}
routes:
  - {default: true, pool: app}
pools:
  - name: app
    consul: {service: app}
    health: {type: websocket, interval: 1s, timeout: 500ms, rise: 1, fall: 1}
consul: {address: %q%s}
`, s.admin, s.wss, certFile, keyFile, s.ws, agent.Addr, extra)
	writeFile(t, s.cfg, body)
	return s
}

// seen dials new connections until want answers whoami, or fails.
func (s *setup) waitFor(t *testing.T, host string, want func(string) bool, what string) {
	t.Helper()
	testkit.Await(t, 20*time.Second, what, func() (bool, string) {
		h := http.Header{}
		if host != "" {
			h.Set("Host", host)
		}
		c, _, err := s.dialer().Dial("ws://"+s.ws+"/", h)
		if err != nil {
			return false, err.Error()
		}
		defer c.Close()
		answer := testkit.Ask(t, c, "whoami")
		return want(answer), fmt.Sprintf("answer %q", answer)
	})
}

// TestConsulFollowsRegistry: backends registered in Consul receive
// clients; a deregistered one stops receiving new ones; a service that
// declares its own route by tags gets it.
func TestConsulFollowsRegistry(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1", "b2", "chat1")
	registerBackend(t, agent.Client, "app", bs[0])
	s := consulSetup(t, agent, ", routes: {allowed_hosts: [chat.test]}")
	startEdge(t, s.cfg)
	s.waitFor(t, "", func(id string) bool { return id == "b1" }, "b1 from Consul")

	registerBackend(t, agent.Client, "app", bs[1])
	s.waitFor(t, "", func(id string) bool { return id == "b2" }, "b2 after it registered")
	if err := agent.Client.Agent().ServiceDeregister("app-b1"); err != nil {
		t.Fatal(err)
	}
	// After the deregistration settles, no new connection reaches b1.
	s.waitFor(t, "", func(id string) bool { return id == "b2" }, "b2")
	for i := 0; i < 10; i++ {
		s.waitFor(t, "", func(id string) bool { return id == "b2" }, "only b2 after b1 deregistered")
	}

	registerBackend(t, agent.Client, "chat", bs[2], "edge.host=chat.test")
	s.waitFor(t, "chat.test", func(id string) bool { return id == "chat1" }, "the route declared by the chat service")
}

// TestConsulOutageLosesNothing: Consul stops and comes back under live
// traffic; no route is lost and no connection dropped (fabio#861,
// fabio#162). Then edge restarts while Consul is down and serves from the
// persisted set (traefik#1689).
func TestConsulOutageLosesNothing(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1")
	registerBackend(t, agent.Client, "app", bs[0])
	s := consulSetup(t, agent, "")
	p := startEdge(t, s.cfg)
	s.waitFor(t, "", func(id string) bool { return id == "b1" }, "b1 from Consul")
	live, _, err := s.dialer().Dial("wss://"+s.wss+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	agent.Stop()
	p.waitLog(t, "discovery: query failed; keeping current members")
	if got := testkit.Ask(t, live, "during outage"); got != "during outage" {
		t.Errorf("live connection during the outage: got %q", got)
	}
	s.waitFor(t, "", func(id string) bool { return id == "b1" }, "b1 while Consul is down")

	agent.Restart()
	s.waitFor(t, "", func(id string) bool { return id == "b1" }, "b1 after Consul came back")
	if got := testkit.Ask(t, live, "after outage"); got != "after outage" {
		t.Errorf("live connection after the outage: got %q", got)
	}

	// Cold start while Consul is down: the persisted set serves.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.done; err != nil {
		t.Fatalf("edge exit: %v", err)
	}
	p.done <- nil
	if _, err := os.Stat(filepath.Join(s.dir, "state")); err != nil {
		t.Fatalf("no state directory: %v", err)
	}
	agent.Stop()
	startEdge(t, s.cfg)
	s.waitFor(t, "", func(id string) bool { return id == "b1" }, "b1 from the persisted set with Consul down")
}

// TestConsulSelfRegistration: edge registers itself with a check on its
// /readyz and leaves the catalog on shutdown.
func TestConsulSelfRegistration(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1")
	registerBackend(t, agent.Client, "app", bs[0])
	s := consulSetup(t, agent, ", register: {enabled: true, service: edge}")
	p := startEdge(t, s.cfg)
	p.waitLog(t, "registered in consul")
	// Consul runs the check on its own schedule: there is no event to await.
	testkit.Await(t, 20*time.Second, "edge passing in Consul", func() (bool, string) {
		entries, _, err := agent.Client.Health().Service("edge", "", true, nil)
		return err == nil && len(entries) == 1, fmt.Sprintf("%v %v", entries, err)
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.done
	p.done <- nil
	svcs, err := agent.Client.Agent().Services()
	if err != nil {
		t.Fatal(err)
	}
	for id := range svcs {
		if strings.HasPrefix(id, "edge") {
			t.Errorf("edge still registered after shutdown: %s", id)
		}
	}
}

// TestFleetSharesTicketKeysThroughConsul: two edges whose listeners keep
// their session-ticket keys at the same Consul KV path accept each other's
// tickets, so a client resumes on whichever edge its next connection lands
// (field note 13: traefik PR #10284, envoy#7397), with no key file copied
// by hand.
func TestFleetSharesTicketKeysThroughConsul(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1")
	dir := t.TempDir()
	certFile, keyFile, roots := writeCert(t, dir)
	var addrs []string
	for range 2 {
		addrs = append(addrs, startTicketKeysEdge(t, agent.Addr, bs[0].Addr(), dir, certFile, keyFile))
	}
	p, _, err := agent.Client.KV().Get("edge/ticket-keys", nil)
	if err != nil || p == nil {
		t.Fatalf("no keys in Consul KV after two edges started: %v %v", p, err)
	}
	// Sealed: a reader of the entry alone learns no key.
	if !strings.HasPrefix(string(p.Value), "edge-sealed-v1 ") {
		t.Fatalf("the entry is not sealed: %q", p.Value)
	}

	d := testkit.Dialer(roots, "")
	d.TLSClientConfig.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	dial := func(addr string) bool {
		t.Helper()
		c, _, err := d.Dial("wss://"+addr+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		testkit.Ask(t, c, "x") // reading is what takes the ticket in (TLS 1.3)
		return c.UnderlyingConn().(*tls.Conn).ConnectionState().DidResume
	}
	if dial(addrs[0]) {
		t.Fatal("first connection resumed a session it never had")
	}
	if !dial(addrs[1]) {
		t.Fatal("a ticket from one edge was not accepted by the other")
	}
}

// TestTicketKeysConsulDownAtStart: an edge whose ticket keys live in Consul
// KV starts and serves while Consul is down (traefik#1689), with a key of
// its own; once Consul is back it creates the fleet's entry there.
func TestTicketKeysConsulDownAtStart(t *testing.T) {
	agent := consultest.Start(t)
	agent.Stop()
	bs := backends(t, "b1")
	dir := t.TempDir()
	certFile, keyFile, roots := writeCert(t, dir)
	addr := startTicketKeysEdge(t, agent.Addr, bs[0].Addr(), dir, certFile, keyFile)
	d := testkit.Dialer(roots, "")
	c, _, err := d.Dial("wss://"+addr+"/", nil)
	if err != nil {
		t.Fatalf("edge does not serve while Consul is down: %v", err)
	}
	testkit.Ask(t, c, "x")
	c.Close()

	agent.Restart()
	testkit.Await(t, 30*time.Second, "ticket keys in Consul after it came back", func() (bool, string) {
		p, _, err := agent.Client.KV().Get("edge/ticket-keys", nil)
		return err == nil && p != nil, fmt.Sprint(err)
	})
}

// startTicketKeysEdge starts an edge with one TLS listener whose ticket
// keys live at edge/ticket-keys in the Consul agent at consulAddr, in front
// of one backend; it returns the listener's address.
func startTicketKeysEdge(t *testing.T, consulAddr, backend, dir, certFile, keyFile string) string {
	t.Helper()
	addr, _, _ := startSealedTicketKeysEdge(t, consulAddr, backend, dir, certFile, keyFile, sealKeyFile(t, dir))
	return addr
}

// startSealedTicketKeysEdge is startTicketKeysEdge with the seal key in
// the file seal; it returns the TLS listener's address, the admin
// listener's and the process.
func startSealedTicketKeysEdge(t *testing.T, consulAddr, backend, dir, certFile, keyFile, seal string) (addr, admin string, p *proc) {
	t.Helper()
	addr, admin = testkit.ClosedPort(t), testkit.ClosedPort(t)
	cfg := fmt.Sprintf(`admin: {address: %q}
consul: {address: %q}
listeners:
  - address: %q
    tls:
      certificates: [{cert_file: %q, key_file: %q}]
      session_tickets: {consul_key: edge/ticket-keys, consul_seal_key_file: %q}
routes: [{default: true, pool: app}]
pools:
  - name: app
    backends: [{id: b1, address: %q}]
`, admin, consulAddr, addr, certFile, keyFile, seal, backend)
	f, err := os.CreateTemp(dir, "edge-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(cfg); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return addr, admin, startEdge(t, f.Name())
}

// TestConsulTicketKeysRefuseBadEntry: an entry that is not due for
// rotation but does not parse is refused with its KV path and line, and
// left as it is (the terminator then keeps the keys it has).
func TestConsulTicketKeysRefuseBadEntry(t *testing.T) {
	agent := consultest.Start(t)
	bad := []byte("not a key\nnot one either\n")
	kv := agent.Client.KV()
	if _, err := kv.Put(&api.KVPair{Key: "edge/tk", Value: bad, Flags: uint64(time.Now().Unix())}, nil); err != nil {
		t.Fatal(err)
	}
	client, err := consul.NewClient(consul.ClientOptions{Address: agent.Addr})
	if err != nil {
		t.Fatal(err)
	}
	seal := sealKeyFile(t, t.TempDir())
	stamp := uint64(time.Now().Unix())
	bad = sealedWith(t, seal, "edge/tk", stamp, bad)
	if _, err := kv.Put(&api.KVPair{Key: "edge/tk", Value: bad, Flags: stamp}, nil); err != nil {
		t.Fatal(err)
	}
	src, err := newConsulTicketKeys(client, conf.SessionTickets{ConsulKey: "edge/tk", RotateEvery: conf.Duration(time.Hour), Keep: 3, ConsulSealKeyFile: seal})
	if err != nil {
		t.Fatal(err)
	}
	_, err = src.TicketKeys(context.Background())
	if err == nil || !strings.Contains(err.Error(), `"edge/tk"`) || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad entry: got %v, want an error naming the key and the line", err)
	}
	if p, _, err := kv.Get("edge/tk", nil); err != nil || p == nil || string(p.Value) != string(bad) {
		t.Fatalf("bad entry changed: %v %v", p, err)
	}
}

// TestTwoEdgesOnOneHostRegisterApart: two edges sharing their public ports
// (SO_REUSEPORT) through one Consul agent register two instances of edge
// and two of edge-metrics, each edge-metrics at its own metrics listener,
// instead of overwriting one service ID.
func TestTwoEdgesOnOneHostRegisterApart(t *testing.T) {
	agent := consultest.Start(t)
	bs := backends(t, "b1")
	registerBackend(t, agent.Client, "app", bs[0])
	s1 := consulSetup(t, agent, ", register: {enabled: true}")
	s2 := consulSetup(t, agent, ", register: {enabled: true}")
	metrics := map[string]string{}
	for _, s := range []*setup{s1, s2} {
		m := testkit.ClosedPort(t)
		body := readFile(t, s.cfg)
		body = strings.ReplaceAll(body, s.wss, s1.wss)
		body = strings.ReplaceAll(body, s.ws, s1.ws)
		writeFile(t, s.cfg, fmt.Sprintf("metrics: {address: %q}\n%s", m, body))
		p := startEdge(t, s.cfg)
		p.waitLog(t, `"service":"edge-metrics"`)
		metrics[m] = s.admin
	}
	svcs, err := agent.Client.Agent().Services()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for id, svc := range svcs {
		count[svc.Service]++
		if svc.Service == "edge-metrics" {
			addr := net.JoinHostPort(svc.Address, strconv.Itoa(svc.Port))
			if _, ok := metrics[addr]; !ok {
				t.Errorf("edge-metrics %s announces %s, not a metrics listener (%v)", id, addr, metrics)
			}
		}
		if svc.Service == "edge" && strconv.Itoa(svc.Port) != s1.wss[strings.LastIndex(s1.wss, ":")+1:] {
			t.Errorf("edge %s announces port %d, want the shared public port of %s", id, svc.Port, s1.wss)
		}
	}
	if count["edge"] != 2 || count["edge-metrics"] != 2 {
		t.Errorf("two edges registered %v, want 2 edge and 2 edge-metrics", count)
	}
}

// sealKeyFile writes the fleet's seal key (32 bytes, hex) into dir once
// and returns its path: every edge of a test shares it.
func sealKeyFile(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "ticket-seal.key")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	writeFile(t, p, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n")
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// sealedWith seals v for the entry at path with the key in the file
// seal, from the format fleet/sealedentry.go documents (written here
// from that text, so the test checks the format, not the code).
func sealedWith(t *testing.T, seal, path string, flags uint64, v []byte) []byte {
	t.Helper()
	key, err := (&conf.SessionTickets{ConsulSealKeyFile: seal}).SealKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := aes.NewCipher(key)
	g, _ := cipher.NewGCM(b)
	nonce := make([]byte, 12)
	rand.Read(nonce)
	ad := binary.BigEndian.AppendUint64([]byte("edge-sealed-v1\x00"+path+"\x00"), flags)
	box := g.Seal(append([]byte{}, nonce...), nonce, v, ad)
	return []byte("edge-sealed-v1 " + base64.StdEncoding.EncodeToString(box) + "\n")
}
