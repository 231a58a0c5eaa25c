package rawjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

var scanKeys = []string{"model", "stream", "messages", "max_tokens"}

func TestScan(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		name, in string
		err      error
		offset   int
		want     map[string]Field // checked keys; absent ones must be zero
	}{
		{name: "members", in: `{"model":"m","stream":true,"messages":[{"role":"user"}],"max_tokens":16}`,
			want: map[string]Field{"model": {Raw: `"m"`, Idx: 9}, "stream": {Raw: "true", Idx: 22},
				"messages": {Raw: `[{"role":"user"}]`, Idx: 38}, "max_tokens": {Raw: "16", Idx: 69}}},
		{name: "spaces around members", in: " {\n\t\"model\" : \"m\" ,\r\n \"other\": {\"model\": 1} } ",
			want: map[string]Field{"model": {Raw: `"m"`, Idx: 14}}},
		{name: "indented", in: "{\n            \"model\": \"m\"\n}", want: map[string]Field{"model": {Raw: `"m"`, Idx: 23}}},
		{name: "control byte after indentation", in: "{         \x01\"a\":1}", err: ErrSyntax, offset: 10},
		{name: "nested keys are not top-level", in: `{"a":{"model":"x"},"b":[{"stream":true}]}`, want: map[string]Field{}},
		{name: "duplicate key", in: `{"model":"a","x":1,"model":"b"}`,
			want: map[string]Field{"model": {Raw: `"a"`, Idx: 9, Repeat: 27}}},
		{name: "escaped key is the same key", in: `{"mod\u0065l":"a"}`, want: map[string]Field{"model": {Raw: `"a"`, Idx: 14}}},
		{name: "escaped duplicate", in: `{"model":"a","\u006dodel":"b"}`,
			want: map[string]Field{"model": {Raw: `"a"`, Idx: 9, Repeat: 26}}},
		{name: "escaped other key", in: `{"mode\"l":"a","max\/tokens":1}`, want: map[string]Field{}},
		{name: "long escaped key", in: `{"` + strings.Repeat(`\u0041`, 40) + `":1}`, want: map[string]Field{}},
		{name: "escapes and unicode in values", in: `{"model":"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude80 é 网 🚀"}`,
			want: map[string]Field{"model": {Raw: `"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude80 é 网 🚀"`, Idx: 9}}},
		{name: "escape then a byte one above a quote", in: `{"model":"\"#\\]"}`, want: map[string]Field{"model": {Raw: `"\"#\\]"`, Idx: 9}}},
		{name: "escapes and text in one word", in: `{"a":"x\ny\tz\"w","model":"\\\\\/é\n"}`,
			want: map[string]Field{"model": {Raw: `"\\\\\/é\n"`, Idx: 26}}},
		{name: "lone surrogate escape is valid", in: `{"model":"\ud800"}`, want: map[string]Field{"model": {Raw: `"\ud800"`, Idx: 9}}},
		{name: "numbers", in: `{"max_tokens":-0.5e+10,"a":[0,1.0,2E-3,-7]}`, want: map[string]Field{"max_tokens": {Raw: "-0.5e+10", Idx: 14}}},
		{name: "depth at the limit", in: `{"a":` + deep(127) + `}`, want: map[string]Field{}},
		{name: "depth past the limit", in: `{"a":` + deep(128) + `}`, err: ErrDepth, offset: 132},
		{name: "depth past the limit after a syntax error", in: `{"a":x,"b":` + deep(200) + `}`, err: ErrDepth},
		{name: "deep inside a string does not count", in: `{"a":"` + deep(300) + `"}`, want: map[string]Field{}},
		{name: "invalid UTF-8 offset", in: "{\"model\":\"é\xff\"}", err: ErrUTF8, offset: 12},
		{name: "truncated UTF-8 sequence", in: "{\"a\":\"\xe6\x9c\"}", err: ErrUTF8, offset: 6},
		{name: "surrogate encoded in UTF-8", in: "{\"a\":\"\xed\xa0\x80\"}", err: ErrUTF8, offset: 6},
		{name: "overlong encoding", in: "{\"a\":\"\xc0\xaf\"}", err: ErrUTF8, offset: 6},
		{name: "syntax wins over UTF-8", in: "{\"a\":\"\xff\",}", err: ErrSyntax, offset: 9},
		{name: "UTF-8 outside a string", in: "{\"a\":1\xff}", err: ErrSyntax, offset: 6},
		{name: "not an object", in: `[{"model":"m"}]`, err: ErrNotObject},
		{name: "string", in: `"model"`, err: ErrNotObject},
		{name: "empty", in: ``, err: ErrSyntax},
		{name: "spaces only", in: " \n", err: ErrSyntax, offset: 2},
		{name: "trailing text", in: `{} {}`, err: ErrSyntax, offset: 3},
		{name: "trailing comma", in: `{"a":1,}`, err: ErrSyntax, offset: 7},
		{name: "unquoted key", in: `{a:1}`, err: ErrSyntax, offset: 1},
		{name: "control character in string", in: "{\"a\":\"x\ny\"}", err: ErrSyntax, offset: 7},
		{name: "bad escape", in: `{"a":"\x"}`, err: ErrSyntax, offset: 7},
		{name: "short unicode escape", in: `{"a":"\u12"}`, err: ErrSyntax, offset: 10},
		{name: "leading zero", in: `{"a":01}`, err: ErrSyntax, offset: 6},
		{name: "bare minus", in: `{"a":-}`, err: ErrSyntax, offset: 6},
		{name: "truncated literal", in: `{"a":tru}`, err: ErrSyntax, offset: 5},
		{name: "unterminated string", in: `{"a":"abcdefghijklmnop`, err: ErrSyntax, offset: 22},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var fields [4]Field
			err := Scan([]byte(tc.in), 128, scanKeys, fields[:])
			if tc.err != nil {
				var e *Error
				if !errors.As(err, &e) || !errors.Is(err, tc.err) || e.Offset != tc.offset {
					t.Fatalf("Scan(%q) = %v, want %v at %d", tc.in, err, tc.err, tc.offset)
				}
				return
			}
			if err != nil {
				t.Fatalf("Scan(%q) = %v", tc.in, err)
			}
			for i, k := range scanKeys {
				if got, want := fields[i], tc.want[k]; got != want {
					t.Errorf("%s = %+v, want %+v", k, got, want)
				}
			}
		})
	}
}

func TestUnquote(t *testing.T) {
	for _, in := range []string{`"plain"`, `""`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u7f51\ud83d\ude80"`, `"\ud800x"`, `"\udc00\ud800"`, `"é 🚀"`} {
		var want string
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if got := Unquote(in); got != want {
			t.Errorf("Unquote(%s) = %q, want %q", in, got, want)
		}
	}
	if got := Unquote("12"); got != "" {
		t.Errorf("Unquote(12) = %q", got)
	}
}

func TestInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"256", 256}, {"-5", -5}, {"1.9", 1}, {"-1.9", -1}, {"1e3", 1000}, {"2.5E2", 250},
		{"123456789012345678", 123456789012345678}, {"-9223372036854775807", -9223372036854775807}, {"true", 0},
	} {
		if got := Int(tc.in); got != tc.want {
			t.Errorf("Int(%s) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// FuzzScan checks Scan's and Valid's verdicts against encoding/json: Valid
// accepts what json.Valid accepts within the depth limit, and Scan
// accepts that when it is also UTF-8 and an object, with the UTF-8 offset
// checkUTF8 used to report, and the fields encoding/json decodes.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":16}`,
		`{"mod\u0065l":"a","model":"b"}`, "{\"a\":\"\xff\"}", `[[[[]]]]`, `{"a":1e5,"b":-0.0,"c":[true,false,null]}`,
		`{"a":"\ud83d\ude80 é"}`, ` 1 `, `{"a":01}`, `{"a":"x`, ``} {
		f.Add([]byte(s))
	}
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
	f.Add([]byte("{\n        \"model\": \"m\",\n\t\t\"messages\": [\r\n                {}\n        ]\n}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		const depth = 16
		shallow := Shallow(b, depth)
		valid := json.Valid(b) && shallow
		if got := Valid(b, depth); got != valid {
			t.Fatalf("Valid(%q) = %v, json.Valid and depth say %v", b, got, valid)
		}
		var fields [4]Field
		err := Scan(b, depth, scanKeys, fields[:])
		var e *Error
		if err != nil && !errors.As(err, &e) {
			t.Fatalf("Scan(%q) = %v, not an *Error", b, err)
		}
		switch {
		case !shallow:
			if !errors.Is(err, ErrDepth) {
				t.Fatalf("Scan(%q) = %v, want ErrDepth", b, err)
			}
			return
		case !valid:
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("Scan(%q) = %v, want ErrSyntax", b, err)
			}
			return
		case !utf8.Valid(b):
			if !errors.Is(err, ErrUTF8) || e.Offset != firstInvalid(b) {
				t.Fatalf("Scan(%q) = %v, want ErrUTF8 at %d", b, err, firstInvalid(b))
			}
			return
		}
		var obj map[string]json.RawMessage
		// null decodes into a map without error, and is not an object.
		if json.Unmarshal(b, &obj) != nil || obj == nil {
			if !errors.Is(err, ErrNotObject) {
				t.Fatalf("Scan(%q) = %v, want ErrNotObject", b, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Scan(%q) = %v", b, err)
		}
		for i, k := range scanKeys {
			fd := fields[i]
			if fd.Raw != "" && string(b[fd.Idx:fd.Idx+len(fd.Raw)]) != fd.Raw {
				t.Fatalf("%s: Raw %q is not at %d", k, fd.Raw, fd.Idx)
			}
			// encoding/json keeps the last of repeated keys.
			raw, ok := obj[k]
			switch {
			case !ok && fd.Raw != "":
				t.Fatalf("%s found in %q, encoding/json does not see it", k, b)
			case ok && fd.Repeat == 0 && fd.Raw != string(raw):
				t.Fatalf("%s = %q in %q, encoding/json reads %q", k, fd.Raw, b, raw)
			}
		}
	})
}

// firstInvalid is the offset of the first byte of b that does not start a
// valid UTF-8 sequence.
func firstInvalid(b []byte) int {
	off := 0
	for off < len(b) {
		r, n := utf8.DecodeRune(b[off:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		off += n
	}
	return off
}

// seedPieces are the kinds of byte str treats apart: escapes (valid and
// not), a quote, control bytes, valid and invalid UTF-8.
var seedPieces = []string{`\"`, `\\`, `\n`, `\/`, `\u00e9`, `\ud83d\ude80`, `\u12`, `\x`, `\`, `"`, `\"#`, `\\]`,
	"\x00", "\x1f", "\n", "\x7f", "é", "网", "🚀", "\xff", "\xc3", "\xe6\x9c", "\xf0\x9f\x9a",
	"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe0\x80\xaf", "\xf0\x80\x80\xaf", "\x80"}

// alignmentSeeds are string bodies that put each kind of byte str treats
// apart (an escape, a quote, a control byte, valid and invalid UTF-8) at
// every offset of an eight-byte word, in short and in long strings, and at
// the end of the text.
func alignmentSeeds() []string {
	var out []string
	for _, p := range seedPieces {
		for k := range 16 {
			pre := strings.Repeat("a", k)
			out = append(out,
				// Inside a run of multibyte text, as whole words without a
				// stop byte go through the automaton from memory.
				`{"model":"`+strings.Repeat("网é🚀", 3)+pre+p+strings.Repeat("éΩ", 8)+`"}`,
				`{"model":"`+pre+p+`"}`,
				`{"model":"`+pre+p+strings.Repeat("b", 40)+p+pre+`","x":"`+p+`"}`,
				`{"model":"`+pre+p)
		}
	}
	return out
}

// blockSeeds are long strings, for the 64-byte blocks of the vector
// reader: each of seedPieces (and runs of backslashes) at each
// offset of a block, in strings that span blocks, after runs of
// backslashes that cross into the next block, and at the end of the text.
// Plain tests read all of them; the fuzz targets start from every
// sixteenth (their baseline pass over thousands of seeds would take most
// of a short fuzz run).
func blockSeeds() []string {
	var out []string
	for _, p := range append(seedPieces, `\\\\\\\\"`, `\\\\\\\"`, `\u00e9\u00e9`, `\u123`) {
		for k := range 64 {
			pre := strings.Repeat("a", k)
			out = append(out,
				`{"model":"`+pre+p+strings.Repeat("b", 70)+`"}`,
				`{"model":"`+strings.Repeat("网", 20)+pre+p+`é"}`,
				`{"model":"`+pre+strings.Repeat(`\\\\`, 10)+p+strings.Repeat("b", 60)+p+`"}`,
				`{"x":"`+strings.Repeat("c", 60)+`","model":"`+pre+p+strings.Repeat("b", 54),
				`{"model":"`+strings.Repeat("b", 64)+pre+p)
		}
	}
	return out
}

// fuzzSeeds are alignmentSeeds and every sixteenth of blockSeeds.
func fuzzSeeds() []string {
	out := alignmentSeeds()
	for i, s := range blockSeeds() {
		if i%16 == 0 {
			out = append(out, s)
		}
	}
	return out
}

// TestScanAlignments checks Scan's verdict on alignmentSeeds and
// blockSeeds against encoding/json and utf8, in a plain test run
// (FuzzScan's seeds also do, with the fields).
func TestScanAlignments(t *testing.T) {
	for _, s := range append(alignmentSeeds(), blockSeeds()...) {
		b := []byte(s)
		var fields [4]Field
		err := Scan(b, 16, scanKeys, fields[:])
		var e *Error
		errors.As(err, &e)
		switch {
		case !json.Valid(b):
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("Scan(%q) = %v, want ErrSyntax", s, err)
			}
		case !utf8.Valid(b):
			if !errors.Is(err, ErrUTF8) || e.Offset != firstInvalid(b) {
				t.Errorf("Scan(%q) = %v, want ErrUTF8 at %d", s, err, firstInvalid(b))
			}
		case err != nil:
			t.Errorf("Scan(%q) = %v", s, err)
		case fields[0].Raw == "" || fields[0].Idx != 9:
			t.Errorf("Scan(%q): model = %+v", s, fields[0])
		}
	}
}

// FuzzUnquote checks the decoder against encoding/json: each string token
// Valid accepts decodes as json.Unmarshal decodes it, through Unquote and
// AppendUnquote (which appends to what dst holds).
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`""`, `"plain"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\u7f51\ud83d\ude80"`,
		`"\ud800x"`, `"\udc00\ud800"`, `"\ud83d\u0041"`, `"\ud83d"`, `"é 🚀 \u003c\u003e\u0026"`, `"\\\\"`, `"x\\"`,
		`"` + strings.Repeat(`run of text \n`, 20) + `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !Valid([]byte(s), 1) || !IsString(s) || s[len(s)-1] != '"' {
			return // not one string token, spaces and all
		}
		var want string
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if got := Unquote(s); got != want && utf8.ValidString(s) {
			t.Fatalf("Unquote(%s) = %q, want %q", s, got, want)
		}
		if got := AppendUnquote([]byte("pre"), s); string(got) != "pre"+Unquote(s) {
			t.Fatalf("AppendUnquote(%s) = %q, want %q", s, got, "pre"+Unquote(s))
		}
	})
}

// TestScanAllocatesNothing: a Scan of a valid body, with the caller's keys
// and fields in local arrays, allocates nothing, in the vector build too
// (whose UTF-8 routine, in assembly, the compiler takes to keep its
// argument: a scanner holding the callers' arrays moved them to the heap).
func TestScanAllocatesNothing(t *testing.T) {
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"h\u00e9llo w\u00f6rld, ünïcode"}],"max_tokens":5}`)
	n := testing.AllocsPerRun(200, func() {
		keys := [3]string{"model", "stream", "max_tokens"}
		var fields [3]Field
		if err := Scan(body, 64, keys[:], fields[:]); err != nil {
			t.Fatal(err)
		}
		if fields[0].Raw != `"m"` || fields[2].Raw != "5" {
			t.Fatalf("fields %+v", fields)
		}
	})
	if n != 0 {
		t.Errorf("Scan allocates %v times per call, want 0", n)
	}
}

func TestScanFind(t *testing.T) {
	tests := []struct {
		name, in string
		found    bool
	}{
		{"top level", `{"file_id":"f"}`, true},
		{"deep in an array of objects", `{"messages":[{"content":[{"type":"file","file":{"file_id":"f"}}]}]}`, true},
		{"escaped letter", `{"a":{"\u0066ile_id":"f"}}`, true},
		{"every letter escaped", `{"a":[{"\u0066\u0069\u006C\u0065\u005f\u0069\u0064":1}]}`, true},
		{"in a string only", `{"content":"my \"file_id\": f"}`, false},
		{"a longer key", `{"file_ids":["f"]}`, false},
		{"a shorter key", `{"file_i":"f"}`, false},
		{"a value, not a key", `{"type":"file_id"}`, false},
		{"absent", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var fields [4]Field
			found, err := ScanFind([]byte(tc.in), 128, scanKeys, fields[:], "file_id")
			if err != nil || found != tc.found {
				t.Fatalf("ScanFind(%q) = %v, %v; want %v, nil", tc.in, found, err, tc.found)
			}
		})
	}
	var fields [1]Field
	if found, err := ScanFind([]byte(`{"model":"m","x":{"file_id":1},}`), 128, scanKeys[:1], fields[:], "file_id"); err == nil || found {
		t.Fatalf("a text that is not JSON: found %v, err %v; want false and an error", found, err)
	}
}
