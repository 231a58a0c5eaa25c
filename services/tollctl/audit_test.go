package main

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/audit"
	"github.com/tollgate/tollgate/pkg/natstest"
)

func TestRevokeAudited(t *testing.T) {
	url := natstest.Start(t).ClientURL()
	steps := []struct {
		name string
		args []string
	}{
		{"revoke with --actor", []string{"revoke", "--nats", url, "--jti", "key-1", "--reason", "leaked", "--actor", "alice"}},
		{"unrevoke with --actor", []string{"unrevoke", "--nats", url, "--jti", "key-1", "--actor", "bob"}},
		{"revoke as the OS user", []string{"revoke", "--nats", url, "--sub", "carol"}},
	}
	for _, s := range steps {
		if code, _, stderr := run1(t, nil, s.args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", s.name, code, stderr)
		}
	}
	code, stdout, stderr := run1(t, nil, "audit", "--nats", url, "--json")
	if code != 0 {
		t.Fatalf("audit: exit %d: %s", code, stderr)
	}
	var events []audit.Event
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		var e audit.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		events = append(events, e)
	}
	want := []struct{ actor, action, target string }{
		{"alice", audit.ActionTokenRevoked, "jti:key-1"},
		{"bob", audit.ActionTokenUnrevoked, "jti:key-1"},
		{"", audit.ActionTokenRevoked, "sub:carol"},
	}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d:\n%s", len(events), len(want), stdout)
	}
	for i, w := range want {
		e := events[i]
		if (w.actor != "" && e.Actor != w.actor) || e.Actor == "" || e.Action != w.action || e.Target != w.target || e.ID == "" {
			t.Errorf("event %d = %+v, want %+v", i, e, w)
		}
	}
	if !strings.Contains(string(events[0].After), `"reason":"leaked"`) || len(events[1].Before) == 0 {
		t.Errorf("before/after: revoke after %s, unrevoke before %s", events[0].After, events[1].Before)
	}

	code, stdout, _ = run1(t, nil, "audit", "--nats", url, "--since", "1h")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != 3 || !strings.Contains(lines[0], "alice  token.revoked  jti:key-1  revoked jti:key-1: leaked") {
		t.Errorf("audit text: exit %d\n%s", code, stdout)
	}
}

func TestRevokeAuditFailureExitsNonZero(t *testing.T) {
	ns := natstest.Start(t)
	url := ns.ClientURL()
	// The revocation bucket exists but the audit stream's subjects are
	// taken by another stream, so the event cannot be stored.
	if code, _, stderr := run1(t, nil, "revocations", "--nats", url); code != 0 {
		t.Fatal(stderr)
	}
	nc := natstest.Connect(t, ns)
	if _, err := nc.Request("$JS.API.STREAM.CREATE.OTHER", []byte(`{"name":"OTHER","subjects":["tollgate.audit.>"],"storage":"memory","no_ack":true}`), 5e9); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run1(t, nil, "revoke", "--nats", url, "--jti", "key-2", "--actor", "alice")
	if code != 1 || !strings.Contains(stdout, "revoked jti key-2") || !strings.Contains(stderr, "audit event not recorded") {
		t.Errorf("exit %d stdout %q stderr %q; want the revocation made, the lost event reported, exit 1", code, stdout, stderr)
	}
}
