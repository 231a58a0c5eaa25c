package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
)

func TestRun(t *testing.T) {
	var seen requestLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen.add(r.Header.Get("Authorization"), r.Header.Get("X-Team"))
		if gjson.GetBytes(b, "stream").Bool() {
			w.Header().Set("Content-Type", "text/event-stream")
			for i, c := range []string{`"role":"assistant","content":""`, `"content":"a"`, `"content":"b"`} {
				fr := "null"
				if i == 2 {
					fr = `"stop"`
				}
				_, _ = io.WriteString(w, `data: {"id":"c1","choices":[{"delta":{`+c+`},"finish_reason":`+fr+`}]}`+"\n\n")
			}
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		_, _ = io.WriteString(w, `{"id":"c1","choices":[{"message":{"role":"assistant","content":"hi"}}]}`)
	}))
	defer srv.Close()
	body := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(body, []byte(`{"model":"m","stream":true,"mock":{"chunks":2}}`), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		successes int64
	}{
		{"chat", []string{"-url", srv.URL, "-n", "5", "-c", "2", "-warmup", "0", "-json", "-", "-header", "X-Team: blue"}, 0, 5},
		{"stream from file", []string{"-url", srv.URL, "-body", body, "-n", "4", "-json", "-"}, 0, 4},
		{"stream chunk mismatch is data", []string{"-url", srv.URL, "-stream", "-chunks", "3", "-n", "2", "-json", "-"}, 0, 0},
		{"remote target", []string{"-url", "http://192.0.2.1/v1/chat/completions", "-n", "1"}, 2, -1},
		{"bad flag", []string{"-nope"}, 2, -1},
		{"bad pid", []string{"-pid", "12,x"}, 2, -1},
		{"generation flag with body file", []string{"-body", body, "-prompt-words", "3"}, 2, -1},
		{"stream flag contradicts body file", []string{"-url", srv.URL, "-body", body, "-stream=false"}, 2, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, "secret-token", &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if tc.successes < 0 {
				return
			}
			var rep struct {
				Successes int64            `json:"successes"`
				Requests  int64            `json:"requests"`
				Errors    map[string]int64 `json:"errors_by_kind"`
				Params    map[string]any   `json:"params"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("json report: %v\n%s", err, stdout.String())
			}
			if rep.Successes != tc.successes || rep.Requests == 0 {
				t.Fatalf("report %+v", rep)
			}
			if strings.Contains(stdout.String(), "secret-token") || strings.Contains(stderr.String(), "secret-token") {
				t.Fatal("the token leaked into the report")
			}
			if !strings.Contains(stderr.String(), "latency") {
				t.Fatalf("no table on stderr:\n%s", stderr.String())
			}
		})
	}
	if !seen.sawAll("Bearer secret-token", "blue") {
		t.Fatal("token or extra header not sent")
	}
}

// requestLog records what the server saw; httptest serves each connection
// on its own goroutine.
type requestLog struct {
	mu           sync.Mutex // guards auths and teams
	auths, teams []string
}

func (l *requestLog) add(auth, team string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.auths = append(l.auths, auth)
	l.teams = append(l.teams, team)
}

// sawAll reports whether every request carried auth and some carried team.
func (l *requestLog) sawAll(auth, team string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	seenTeam := false
	for i := range l.auths {
		if l.auths[i] != auth {
			return false
		}
		seenTeam = seenTeam || l.teams[i] == team
	}
	return len(l.auths) > 0 && seenTeam
}
