package main

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/conformance"
)

// TestVerifyCommand checks the command line of tollctl verify; the kit
// itself runs against a real gateway in pkg/conformance's tests.
func TestVerifyCommand(t *testing.T) {
	// A closed port: every case fails to connect.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"list", []string{"verify", "--list"}, 0, conformance.Names(conformance.DefaultRoutes()), nil},
		{"no token", []string{"verify", "--gateway", dead}, 2, nil, []string{"give --token"}},
		{"unknown case", []string{"verify", "--token", "t", "--case", "stream,nope"}, 2, nil, []string{`unknown case "nope"`, "stream-cut"}},
		{"arguments", []string{"verify", "--token", "t", "extra"}, 2, nil, []string{"unexpected arguments"}},
		{"gateway down", []string{"verify", "--gateway", dead, "--token", "t", "--case", "stream,unknown-model"}, 1,
			[]string{"stream ", "unknown-model", "FAIL", "not checked", "connection refused", "2 of 2 cases fail"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run1(t, nil, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		code, stdout, _ := run1(t, nil, "verify", "--gateway", dead, "--token", "t", "--case", "non-stream", "--json")
		var rep conformance.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, stdout)
		}
		if code != 1 || rep.OK || len(rep.Results) != 1 || rep.Results[0].Client.Verdict != conformance.Fail {
			t.Errorf("exit %d, report %+v", code, rep)
		}
	})
}
