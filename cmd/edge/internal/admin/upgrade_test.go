package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// fakeUpgrader records the binaries it was asked to start and answers err.
type fakeUpgrader struct {
	asked []string
	err   error
}

func (f *fakeUpgrader) Upgrade(binary string) error {
	f.asked = append(f.asked, binary)
	return f.err
}
func (f *fakeUpgrader) Binary() string { return "/usr/bin/edge" }

// postUpgrade answers one POST of body to every upgrade endpoint of u and
// returns the codes and the last body.
func postUpgrade(t *testing.T, u Upgrader, body string) ([]int, string) {
	t.Helper()
	var codes []int
	var last string
	eps := UpgradeEndpoints(u)
	if len(eps) != 2 || eps[0].Path != "/api/v1/upgrade" || eps[1].Path != "/api/upgrade" {
		t.Fatalf("endpoints: %+v", eps)
	}
	for _, ep := range eps {
		if ep.Method != "POST" || ep.Access != Write {
			t.Errorf("%s: %s access %v, want a POST of write access", ep.Path, ep.Method, ep.Access)
		}
		w := httptest.NewRecorder()
		serveAPI(w, httptest.NewRequest("POST", ep.Path, strings.NewReader(body)), ep.Handle)
		codes = append(codes, w.Code)
		last = w.Body.String()
	}
	return codes, last
}

// TestUpgradeEndpointAnswers: the default binary or an absolute one starts
// and the answer names it and this process; a relative path is refused
// before anything starts; a refusal keeps its 409, a failure is a 500 with
// its reason.
func TestUpgradeEndpointAnswers(t *testing.T) {
	u := &fakeUpgrader{}
	codes, body := postUpgrade(t, u, "")
	var doc UpgradeAnswer
	if err := json.Unmarshal([]byte(body), &doc); err != nil || codes[0] != 200 || codes[1] != 200 {
		t.Fatalf("default upgrade: %v %s (%v)", codes, body, err)
	}
	if doc != (UpgradeAnswer{Result: "ok", Binary: "/usr/bin/edge", OldPID: os.Getpid()}) {
		t.Errorf("answer %+v", doc)
	}
	_, body = postUpgrade(t, u, `{"binary":"/opt/edge-2"}`)
	if !strings.Contains(body, `"/opt/edge-2"`) || u.asked[len(u.asked)-1] != "/opt/edge-2" {
		t.Errorf("upgrade to /opt/edge-2: asked %q, answered %s", u.asked, body)
	}

	u = &fakeUpgrader{}
	if codes, body = postUpgrade(t, u, `{"binary":"edge-2"}`); codes[0] != 400 || len(u.asked) != 0 || !strings.Contains(body, "absolute") {
		t.Errorf("relative binary: %v %s, asked %q; want 400 and nothing started", codes, body, u.asked)
	}
	if codes, _ = postUpgrade(t, u, `{"binary":"/x","other":1}`); codes[0] != 400 || len(u.asked) != 0 {
		t.Errorf("unknown field: %v, asked %q; want 400 and nothing started", codes, u.asked)
	}

	u = &fakeUpgrader{err: Errorf(http.StatusConflict, "an upgrade is under way")}
	if codes, body = postUpgrade(t, u, ""); codes[0] != 409 || !strings.Contains(body, "under way") {
		t.Errorf("refused: %v %s, want 409 with the reason", codes, body)
	}
	u = &fakeUpgrader{err: errors.New("new process exited: status 1")}
	if codes, body = postUpgrade(t, u, ""); codes[0] != 500 || !strings.Contains(body, "exited: status 1") {
		t.Errorf("failed: %v %s, want 500 with the reason", codes, body)
	}
}
