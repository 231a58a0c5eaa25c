//go:build goexperiment.simd && amd64

package rawjson

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// scanBoth runs Scan with the vector string reader and with the
// word-at-a-time one and returns each verdict with the fields found.
func scanBoth(t testing.TB, b []byte) (vector, words string) {
	if !haveSIMD {
		t.Skip("this machine has no AVX2: the build reads a word at a time only")
	}
	run := func() string {
		var fields [4]Field
		err := Scan(b, 16, scanKeys, fields[:])
		return fmt.Sprintf("%v %+v valid=%v", err, fields, Valid(b, 16))
	}
	vector = run()
	haveSIMD = false
	defer func() { haveSIMD = true }()
	return vector, run()
}

// TestBlocksAgree checks that the two string readers give the same
// verdicts, offsets and fields on the alignment and block seeds and on random
// strings of escapes, quotes, control bytes and UTF-8 (valid and not)
// spanning several blocks.
func TestBlocksAgree(t *testing.T) {
	for _, s := range append(alignmentSeeds(), blockSeeds()...) {
		if v, w := scanBoth(t, []byte(s)); v != w {
			t.Fatalf("Scan(%q): vector reader %s, word reader %s", s, v, w)
		}
	}
	pieces := []string{"a", "bcdefgh", `\"`, `\\`, `\n`, `\u00e9`, `\u12`, `\x`, `\`, `"`, "\x01", "é", "网", "\xff", "\xe6\x9c", `","model":"`}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var sb strings.Builder
		sb.WriteString(`{"model":"`)
		for range r.IntN(120) {
			p := pieces[r.IntN(len(pieces))]
			if r.IntN(4) > 0 {
				p = pieces[r.IntN(2)] // mostly plain text, as in a chat history
			}
			sb.WriteString(p)
		}
		if r.IntN(8) > 0 {
			sb.WriteString(`"}`)
		}
		if v, w := scanBoth(t, []byte(sb.String())); v != w {
			t.Fatalf("Scan(%q): vector reader %s, word reader %s", sb.String(), v, w)
		}
	}
}

// FuzzBlocks checks the vector string reader against the word-at-a-time
// one on any text: the same verdict, offset and fields.
func FuzzBlocks(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, w := scanBoth(t, b); v != w {
			t.Fatalf("Scan(%q): vector reader %s, word reader %s", b, v, w)
		}
	})
}
