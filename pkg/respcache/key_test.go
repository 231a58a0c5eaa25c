package respcache

import (
	"errors"
	"testing"
)

func TestNewKey(t *testing.T) {
	const base = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"temperature":0}`
	scope := Scope{Dept: "eng", Team: "search"}
	baseKey, err := NewKey("/chat/completions", []byte(base), scope)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		endpoint string
		body     string
		scope    Scope
		same     bool
	}{
		{name: "identical", body: base, same: true},
		{name: "key order and whitespace", same: true,
			body: "{ \"temperature\": 0,\n \"messages\": [ {\"content\": \"hi\", \"role\": \"user\"} ],\n \"model\": \"gpt-4o\" }"},
		{name: "escaped text", same: true, body: `{"model":"gpt-4o","messages":[{"role":"user","content":"\u0068i"}],"temperature":0}`},
		{name: "user is ignored", same: true, body: `{"model":"gpt-4o","user":"alice","messages":[{"role":"user","content":"hi"}],"temperature":0}`},
		{name: "stream false is no stream", same: true, body: `{"model":"gpt-4o","stream":false,"messages":[{"role":"user","content":"hi"}],"temperature":0}`},
		{name: "stream options without stream", same: true, body: `{"model":"gpt-4o","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"temperature":0}`},
		{name: "nested user is kept", body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi","user":"x"}],"temperature":0}`},
		{name: "stream", body: `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}],"temperature":0}`},
		{name: "model", body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"temperature":0}`},
		{name: "message", body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi!"}],"temperature":0}`},
		{name: "number as written", body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"temperature":0.0}`},
		{name: "string is not number", body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"temperature":"0"}`},
		{name: "array order", body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"},{"role":"user","content":"hi"}],"temperature":0}`},
		{name: "endpoint", endpoint: "/completions", body: base},
		{name: "other dept", body: base, scope: Scope{Dept: "sales", Team: "search"}},
		{name: "other team", body: base, scope: Scope{Dept: "eng", Team: "ads"}},
		{name: "dept and team do not run together", body: base, scope: Scope{Dept: "engs", Team: "earch"}},
		{name: "shared", body: base, scope: Scope{Shared: true}},
		{name: "no scope is not shared", body: base, scope: Scope{Dept: "", Team: ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := tt.endpoint
			if ep == "" {
				ep = "/chat/completions"
			}
			sc := tt.scope
			if sc == (Scope{}) && tt.name != "no scope is not shared" {
				sc = scope
			}
			k, err := NewKey(ep, []byte(tt.body), sc)
			if err != nil {
				t.Fatal(err)
			}
			if (k == baseKey) != tt.same {
				t.Fatalf("same key = %v, want %v", k == baseKey, tt.same)
			}
		})
	}
}

func TestNewKeyStreamShapes(t *testing.T) {
	bodies := []string{
		`{"model":"m","stream":true}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m"}`,
	}
	seen := map[Key]string{}
	for _, b := range bodies {
		k, err := NewKey("/chat/completions", []byte(b), Scope{})
		if err != nil {
			t.Fatal(err)
		}
		if other, dup := seen[k]; dup {
			t.Fatalf("%s and %s share a key", b, other)
		}
		seen[k] = b
	}
	shared1, _ := NewKey("/chat/completions", []byte(bodies[2]), Scope{Shared: true, Dept: "a"})
	shared2, _ := NewKey("/chat/completions", []byte(bodies[2]), Scope{Shared: true, Dept: "b"})
	if shared1 != shared2 {
		t.Fatal("shared scope keys differ by dept")
	}
}

func TestNewKeyErrors(t *testing.T) {
	tests := []struct {
		name, body string
		notObject  bool
	}{
		{"invalid", `{"model":`, false},
		{"array", `[1,2]`, true},
		{"string", `"x"`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewKey("/chat/completions", []byte(tt.body), Scope{})
			if err == nil || errors.Is(err, ErrNotObject) != tt.notObject {
				t.Fatalf("NewKey(%s) = %v", tt.body, err)
			}
		})
	}
}

func TestKeyString(t *testing.T) {
	k, _ := NewKey("/chat/completions", []byte(`{}`), Scope{})
	s := k.String()
	if len(s) != 64 {
		t.Fatalf("key %q: want 64 hex digits", s)
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			t.Fatalf("key %q is not lower-case hex (a valid KV key)", s)
		}
	}
}

// TestKeyOf: with the answer form the caller read, KeyOf is NewKey.
func TestKeyOf(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		answer     Answer
	}{
		{"non-stream", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, NonStream},
		{"stream", `{"model":"m","stream":true,"messages":[]}`, Stream},
		{"stream with usage", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, StreamWithUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scope := Scope{Dept: "d", Team: "t"}
			want, err := NewKey("/chat/completions", []byte(tc.body), scope)
			if err != nil {
				t.Fatal(err)
			}
			if got := KeyOf("/chat/completions", []byte(tc.body), tc.answer, scope); got != want {
				t.Errorf("KeyOf = %s, NewKey = %s", got, want)
			}
		})
	}
}
