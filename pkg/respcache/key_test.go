package respcache

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/tollgate/tollgate/pkg/loadgen"
	"github.com/tollgate/tollgate/pkg/rawjson"
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
		{name: "member order at every level", same: true,
			body: `{"messages":[{"content":"hi","role":"user"}],"temperature":0,"model":"gpt-4o"}`},
		{name: "escaped key", same: true, body: `{"model":"gpt-4o","m\u0065ssages":[{"role":"user","content":"hi"}],"temperature":0}`},
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

// TestNewKeyRepeatedKeys: repeated keys are kept in the order written, so
// bodies a provider reads differently (the last copy wins in most parsers)
// do not share a key.
func TestNewKeyRepeatedKeys(t *testing.T) {
	a, errA := NewKey("/chat/completions", []byte(`{"model":"m","temperature":0,"temperature":1}`), Scope{})
	b, errB := NewKey("/chat/completions", []byte(`{"temperature":1,"model":"m","temperature":0}`), Scope{})
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if a == b {
		t.Fatal("repeated keys in another order share a key")
	}
}

// gjsonKey is the key as it was computed before the gateway's scan fed it
// (gjson's parse of the whole body): KeyOf must give the same key for
// every body, so entries stored before stay valid and the key's notion of
// equal requests is unchanged.
func gjsonKey(endpoint string, body []byte, answer Answer, scope Scope) Key {
	w := oracle{h: sha256.New()}
	w.str(keyVersion)
	w.str(endpoint)
	if scope.Shared {
		w.buf = append(w.buf, '*')
	} else {
		w.buf = append(w.buf, 's')
		w.str(scope.Dept)
		w.str(scope.Team)
	}
	w.buf = append(w.buf, [...]byte{NonStream: 'n', Stream: 's', StreamWithUsage: 'u'}[answer])
	w.object(gjson.ParseBytes(body), true)
	var k Key
	w.h.Write(w.buf)
	w.h.Sum(k[:0])
	return k
}

type oracle struct {
	h   hash.Hash
	buf []byte
}

func (w *oracle) str(s string) {
	w.buf = binary.AppendUvarint(w.buf, uint64(len(s)))
	w.buf = append(w.buf, s...)
}

func (w *oracle) object(v gjson.Result, top bool) {
	type member struct {
		key string
		val gjson.Result
	}
	var ms []member
	v.ForEach(func(k, val gjson.Result) bool {
		if !top || !volatile(k.Str) {
			ms = append(ms, member{k.Str, val})
		}
		return true
	})
	slices.SortStableFunc(ms, func(a, b member) int { return strings.Compare(a.key, b.key) })
	w.buf = append(w.buf, '{')
	w.buf = binary.AppendUvarint(w.buf, uint64(len(ms)))
	for _, m := range ms {
		w.str(m.key)
		w.value(m.val)
	}
}

func (w *oracle) value(v gjson.Result) {
	switch {
	case v.IsObject():
		w.object(v, false)
	case v.IsArray():
		w.buf = append(w.buf, '[')
		n := 0
		v.ForEach(func(_, x gjson.Result) bool { n++; return true })
		w.buf = binary.AppendUvarint(w.buf, uint64(n))
		v.ForEach(func(_, x gjson.Result) bool { w.value(x); return true })
	case v.Type == gjson.String:
		w.buf = append(w.buf, '"')
		w.str(v.Str)
	case v.Type == gjson.Number:
		w.buf = append(w.buf, '0')
		w.str(v.Raw)
	case v.Type == gjson.True:
		w.buf = append(w.buf, 't')
	case v.Type == gjson.False:
		w.buf = append(w.buf, 'f')
	default:
		w.buf = append(w.buf, 'z')
	}
}

// keyBodies are bodies KeyOf and gjsonKey must agree on: the mixed chat
// histories of the scan benchmarks, and the shapes a canonical form can
// get wrong.
func keyBodies(t testing.TB) []string {
	out := []string{benchBody, `{}`, ` { "a" : [ ] , "b" : { } } `, `{"user":"u","x":{"user":"kept"}}`,
		`{"a":"\u00e9\ud83d\ude80\ud800x\udc00","b":"é 🚀","c":"\"\\\/\b\f\n\r\t"}`,
		`{"n":[1,1.0,-0,2e3,true,false,null,"1"],"o":{"z":1,"a":{"y":[],"b":[{}]}}}`,
		`{"k":1,"k":2,"\u006b":3}`, `{"` + strings.Repeat("long key ", 200) + `":"` + strings.Repeat("long value ", 500) + `"}`}
	for _, kb := range []int{1, 64} {
		b, err := loadgen.BuildBody(loadgen.BodySpec{Model: "m", HistoryKB: kb, MixedText: true, PromptWords: 16})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

// TestKeyOfMatchesGJSON: the key of each body is the key gjson's walk
// computed, for each answer form and scope.
func TestKeyOfMatchesGJSON(t *testing.T) {
	for i, body := range keyBodies(t) {
		for _, a := range []Answer{NonStream, Stream, StreamWithUsage} {
			for _, sc := range []Scope{{}, {Dept: "d", Team: "t"}, {Shared: true}} {
				if got, want := KeyOf("/chat/completions", []byte(body), a, sc), gjsonKey("/chat/completions", []byte(body), a, sc); got != want {
					t.Fatalf("body %d, answer %d, scope %+v: KeyOf = %s, gjson walk = %s", i, a, sc, got, want)
				}
			}
		}
	}
}

// FuzzKeyOf: for every body the gateway's scan accepts, KeyOf is the key
// gjson's walk computed.
func FuzzKeyOf(f *testing.F) {
	for _, b := range keyBodies(f) {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fields [1]rawjson.Field
		if rawjson.Scan(b, maxDepth, []string{"stream"}, fields[:]) != nil {
			return
		}
		if got, want := KeyOf("/chat/completions", b, NonStream, Scope{}), gjsonKey("/chat/completions", b, NonStream, Scope{}); got != want {
			t.Fatalf("%q: KeyOf = %s, gjson walk = %s", b, got, want)
		}
	})
}
