package rawjson

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/pkg/loadgen"
)

// benchBodies are the request bodies the scan benchmarks read: chat
// histories of about 1, 64 and 512 KiB as loadgen's -history-mixed sends
// them (prose with quotes, newlines and tabs, pasted code whose <, > and &
// are written \u003c, \u003e and \u0026, accents, CJK and emoji: a quote,
// backslash or non-ASCII byte about every 7 bytes), and the same sizes in
// plain ASCII words, and the 64 KiB mixed one indented (four spaces a
// level, as a pretty-printing client sends it).
func benchBodies(b testing.TB) []struct {
	name string
	body []byte
} {
	var out []struct {
		name string
		body []byte
	}
	for _, mixed := range []bool{true, false} {
		for _, kb := range []int{1, 64, 512} {
			body, err := loadgen.BuildBody(loadgen.BodySpec{Model: "mock-gpt", HistoryKB: kb, MixedText: mixed, PromptWords: 16})
			if err != nil {
				b.Fatal(err)
			}
			name := "mixed-"
			if !mixed {
				name = "ascii-"
			}
			out = append(out, struct {
				name string
				body []byte
			}{name + strconv.Itoa(kb) + "KB", body})
		}
	}
	mixed, err := loadgen.BuildBody(loadgen.BodySpec{Model: "mock-gpt", HistoryKB: 64, MixedText: true, PromptWords: 16})
	if err != nil {
		b.Fatal(err)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, mixed, "", "    "); err != nil {
		b.Fatal(err)
	}
	return append(out, struct {
		name string
		body []byte
	}{"indented-64KB", indented.Bytes()})
}

// BenchmarkScan is the gateway's one pass over a request body (validity,
// depth, UTF-8, the watched top-level members), at 1, 64 and 512 KiB, in
// mixed and in plain ASCII text. Expected: 0 allocs/op at every size.
// json.Valid (encoding/json's byte-at-a-time validator, which checks less:
// no UTF-8, no depth, no members) runs on the same bodies in the same run
// as a baseline (BenchmarkJSONValid).
//
// Measured on the 2-core bench machine (2026-12-01), busy, so as one
// thread's CPU time per op (best of 60 runs, interleaved with the scan as
// it was before the word-at-a-time UTF-8 check in one process), MB/s:
//
//	body            before  after
//	mixed-1KB         1353   1571
//	mixed-64KB        1255   1511
//	mixed-512KB       1264   1550
//	ascii-64KB        3189   3415
//	ascii-512KB       3115   3426
//	indented-64KB     1180   1166-1515 (noise)
//
// and BenchmarkScanStrings: ascii 5657 -> 5737, escapes 1128 -> 1191,
// latin 1206 -> 1728, cjk 1123 -> 1651. Built with GOAMD64=v3 (a shift
// by a register is one instruction) mixed text runs about 15% faster
// still. Wall-clock figures on the busy machine are a third of these and
// vary; json.Valid read the same bodies at 130-180 MB/s in the same run.
//
// Whole words of multibyte text fed to the automaton from memory
// (2026-12-02), thread CPU time per op, median of 15 runs interleaved with
// the scan before in one process, on the machine loaded (load 5-8 on its 2
// cores, so ±20% from run to run), MB/s:
//
//	body            before  after
//	mixed-1KB         1203   1219
//	mixed-64KB        1160   1230
//	mixed-512KB       1258   1294
//	ascii-64KB        2252   2194
//	ascii-512KB       2174   2218
//
// and BenchmarkScanStrings: cjk 1355 -> 1530, latin 1534 -> 1572, escapes
// and ascii unchanged; in two quieter runs of 11, cjk +18% and +13%, latin
// +28% and +11%, mixed-64KB +8% and +11%.
//
// The vector string reader (GOEXPERIMENT=simd, AVX2; 2026-12-02, quiet
// machine, best of 5 runs interleaved with the portable build's word
// reader, MB/s; json.Valid in the portable binary):
//
//	body            words  vector  json.Valid
//	mixed-1KB        1896    3744         354
//	mixed-64KB       1850    4578         342
//	mixed-512KB      1779    4490         351
//	ascii-64KB       3422    4905         388
//	ascii-512KB      3331    4914         392
//	indented-64KB    1887    4048         336
//
// and BenchmarkScanStrings: ascii 5484 -> 17793, escapes 1255 -> 9477,
// latin 2358 -> 9138, cjk 2638 -> 11009. Of the vector scan of
// mixed-512KB, about 15% is the whole-text UTF-8 check.
func BenchmarkScan(b *testing.B) {
	for _, bb := range benchBodies(b) {
		b.Run(bb.name, func(b *testing.B) { benchScan(b, bb.body) })
	}
}

// benchScan is the gateway's scan of body, b.N times: the members a chat,
// completions, embeddings or Responses request is read for.
func benchScan(b *testing.B, body []byte) {
	keys := []string{"model", "stream", "stream_options", "messages", "prompt", "input", "max_tokens", "max_completion_tokens", "max_output_tokens"}
	var fields [9]Field
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := Scan(body, 128, keys, fields[:]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONValid is encoding/json's Valid on BenchmarkScan's bodies:
// the same-run baseline.
func BenchmarkJSONValid(b *testing.B) {
	for _, bb := range benchBodies(b) {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			for b.Loop() {
				if !json.Valid(bb.body) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// BenchmarkScanStrings isolates the string scan: one object whose only
// member is a long string of each kind of text.
func BenchmarkScanStrings(b *testing.B) {
	for _, tc := range []struct{ name, text string }{
		{"ascii", strings.Repeat("the quick brown fox jumps over the lazy dog ", 1500)},
		{"escapes", strings.Repeat(`a \"quoted\" word\n\tand C:\\path `, 2000)},
		{"latin", strings.Repeat("Le café coûte 3,50 € ; la réunion est à 14 h — merci. ", 1200)},
		{"cjk", strings.Repeat("要点：网关在发送请求之前检查预算，并在之后计费。", 1000)},
	} {
		body := []byte(`{"model":"m","content":"` + tc.text + `"}`)
		b.Run(tc.name, func(b *testing.B) {
			var fields [1]Field
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := Scan(body, 128, []string{"model"}, fields[:]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
