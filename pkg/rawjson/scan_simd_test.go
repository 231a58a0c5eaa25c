//go:build goexperiment.simd && amd64

package rawjson

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"simd/archsimd"
	"strings"
	"testing"
)

// scanBoth runs Scan with the vector string reader and with the
// word-at-a-time one and returns each verdict with the fields found. The
// vector reader runs twice, with UTF-8 windows of one byte (a check after
// every string) and of the default size, and fails the test when the two
// disagree. On a machine with AVX-512 both vector readers run (blocks512
// and blocks, each with both windows), and the test fails when they
// disagree.
func scanBoth(t testing.TB, b []byte) (vector, words string) {
	t.Helper()
	if !haveSIMD {
		t.Skip("this machine has no AVX2: the build reads a word at a time only")
	}
	run := func() string {
		var fields [4]Field
		err := Scan(b, 16, scanKeys, fields[:])
		return fmt.Sprintf("%v %+v valid=%v", err, fields, Valid(b, 16))
	}
	both := func() string {
		v := run()
		window := utf8Window
		utf8Window = 1
		perString := run()
		utf8Window = window
		if perString != v {
			t.Fatalf("Scan(%q): vector reader (AVX-512 %v) %s with a UTF-8 check after each string, %s with %d-byte windows", b, have512, perString, v, window)
		}
		return v
	}
	vector = both()
	if wide := have512; wide {
		have512 = false
		narrow := both()
		have512 = true
		if narrow != vector {
			t.Fatalf("Scan(%q): 64-byte vector reader %s, 32-byte one %s", b, vector, narrow)
		}
	}
	haveSIMD = false
	defer func() { haveSIMD = true }()
	return vector, run()
}

// TestClassify64 checks that classify64 gives every byte classify's class
// bits.
func TestClassify64(t *testing.T) {
	if !have512 {
		t.Skip("this machine has no AVX-512")
	}
	lo, hi := archsimd.LoadUint8x32(&vLoClass), archsimd.LoadUint8x32(&vHiClass)
	nibble, four := archsimd.LoadUint8x32(&vNibble), archsimd.LoadUint8x32(&vFour)
	lo64, hi64 := archsimd.LoadUint8x64(&wLoClass), archsimd.LoadUint8x64(&wHiClass)
	nibble64, four64 := archsimd.LoadUint8x64(&wNibble), archsimd.LoadUint8x64(&wFour)
	for base := 0; base < 256; base += 64 {
		var in, out [64]byte
		var want [2][32]byte
		for k := range in {
			in[k] = byte(base + k)
		}
		classify64(archsimd.LoadUint8x64(&in), lo64, hi64, nibble64, four64).Store(&out)
		for h := range 2 {
			classify(archsimd.LoadUint8x32((*[32]byte)(in[32*h:])), lo, hi, nibble, four).Store(&want[h])
		}
		for k, c := range in {
			if w := want[k/32][k%32]; out[k] != w {
				t.Errorf("byte %#x: classes %#x, want %#x", c, out[k], w)
			}
		}
	}
}

// TestClassify checks classify's tables on every byte: the bytes an
// escape may end with, and the hexadecimal digits.
func TestClassify(t *testing.T) {
	if !haveSIMD {
		t.Skip("this machine has no AVX2: the build reads a word at a time only")
	}
	lo, hi := archsimd.LoadUint8x32(&vLoClass), archsimd.LoadUint8x32(&vHiClass)
	nibble, four := archsimd.LoadUint8x32(&vNibble), archsimd.LoadUint8x32(&vFour)
	for base := 0; base < 256; base += 32 {
		var in, out [32]byte
		for k := range in {
			in[k] = byte(base + k)
		}
		classify(archsimd.LoadUint8x32(&in), lo, hi, nibble, four).Store(&out)
		for k, c := range in {
			end := strings.IndexByte(`"/\bfnrtu`, c) >= 0
			hex := strings.IndexByte("0123456789ABCDEFabcdef", c) >= 0
			if got := out[k]&classEnd != 0; got != end {
				t.Errorf("byte %#x: ends an escape %v, want %v", c, got, end)
			}
			if got := out[k]&classHex != 0; got != hex {
				t.Errorf("byte %#x: hexadecimal digit %v, want %v", c, got, hex)
			}
		}
	}
}

// TestUTF8Windows checks the windowed UTF-8 check on bodies of several
// windows: a byte sequence that is not UTF-8 early, on either side of a
// window's end, inside a string that spans windows, and last, is refused
// at its offset by both readers.
func TestUTF8Windows(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","messages":[`)
	for k := range 600 {
		if k > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"role":"user","content":"%s é 网 \n %d"}`, strings.Repeat("plain text ", 1+k%13), k)
	}
	sb.WriteString(`,{"role":"user","content":"` + strings.Repeat("long string ", 4000) + `"}`)
	sb.WriteString(`]}`)
	body := sb.String()
	if len(body) < 4*utf8Window {
		t.Fatalf("body of %d bytes, want several %d-byte windows", len(body), utf8Window)
	}
	// Offsets inside strings: a letter after a letter or a space (not
	// the n of an escape).
	letter := func(c byte) bool { return c >= 'a' && c <= 'z' }
	var at []int
	for _, want := range []int{40, utf8Window - 3, utf8Window, utf8Window + 5, 2*utf8Window + 1, len(body) - 5000, len(body) - 10} {
		p := want
		for !letter(body[p]) || !letter(body[p-1]) && body[p-1] != ' ' {
			p++
		}
		at = append(at, p)
	}
	for _, p := range at {
		for _, bad := range []string{"\xff", "\xe6\x9c"} {
			b := []byte(body)
			copy(b[p:], bad)
			v, w := scanBoth(t, b)
			if v != w {
				t.Fatalf("%s at %d: vector reader %s, word reader %s", bad, p, v, w)
			}
			err := Scan(b, 16, scanKeys, make([]Field, 4))
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrUTF8) || e.Offset != firstInvalid(b) {
				t.Fatalf("%s at %d: Scan = %v, want ErrUTF8 at %d", bad, p, err, firstInvalid(b))
			}
		}
	}
	if v, w := scanBoth(t, []byte(body)); v != w || strings.HasPrefix(v, "rawjson") {
		t.Fatalf("valid body: vector reader %s, word reader %s", v, w)
	}
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

// BenchmarkScanReaders is BenchmarkScan's scan with each vector string
// reader in the same run: "avx2" (blocks, two 32-byte vectors a block) and,
// on a machine with AVX-512, "avx512" (blocks512, one 64-byte vector).
//
// On the bench machine (2026-12-04, 3 runs, MB/s): mixed-64KB 3231-3272 ->
// 3874-3913, mixed-512KB 3192-3289 -> 3782-3857, mixed-1KB 1359-2630 ->
// 2838-3102, ascii-64KB 3511-3741 -> 3864-4135, ascii-512KB 3635-3735 ->
// 3135-3748 (noise), indented-64KB 2089-2961 -> 2506-3481. Of the 64-byte
// reader's scan of mixed-64KB, about a quarter is the UTF-8 check.
func BenchmarkScanReaders(b *testing.B) {
	if !haveSIMD {
		b.Skip("this machine has no AVX2")
	}
	wide := have512
	defer func() { have512 = wide }()
	for _, bb := range benchBodies(b) {
		for _, reader := range []string{"avx2", "avx512"} {
			if reader == "avx512" && !wide {
				continue
			}
			b.Run(bb.name+"/"+reader, func(b *testing.B) {
				have512 = reader == "avx512"
				benchScan(b, bb.body)
			})
		}
	}
}
