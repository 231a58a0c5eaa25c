// Command loadgen is the load generator of the benchmark suite. It sends
// OpenAI-style chat or embeddings requests to a local gateway (or the mock
// upstream) in closed loop (-c), open loop (-rate) or hold mode (-hold),
// validates every answer, and reports latency, errors by kind and the CPU
// time and memory of the processes given with -pid.
//
//	loadgen -url http://127.0.0.1:8080/v1/chat/completions -token $TOKEN -c 16 -d 20s -warmup 2s -pid 1234
//	loadgen -stream -chunks 50 -rate 500 -d 30s -json out.json
//	loadgen -stream -chunks 1000 -chunk-delay 100ms -hold 5000 -d 30s -pid 1234
//
// The table goes to stderr, -json FILE (or - for stdout) writes every
// figure. The exit status is 2 for usage errors and 0 otherwise: errors in
// responses are data, not failures of the tool.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tollgate/tollgate/pkg/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv("LOADGEN_TOKEN"), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks errors in the command line.
var errUsage = errors.New("usage")

// run parses args, runs the load and writes the reports; it returns the
// exit status.
func run(ctx context.Context, args []string, envToken string, stdout, stderr io.Writer) int {
	cfg, jsonOut, err := parse(args, envToken, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return 2
	}
	report, err := loadgen.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return 2
	}
	if err := report.WriteTable(stderr); err != nil {
		fmt.Fprintf(stderr, "loadgen: write table: %v\n", err)
		return 1
	}
	if jsonOut != "" {
		if err := writeJSON(report, jsonOut, stdout); err != nil {
			fmt.Fprintf(stderr, "loadgen: %v\n", err)
			return 1
		}
	}
	return 0
}

func writeJSON(r *loadgen.Report, path string, stdout io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = stdout.Write(b)
	} else {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// parse turns the command line into a run configuration and the JSON
// output path.
func parse(args []string, envToken string, stderr io.Writer) (loadgen.Config, string, error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg       loadgen.Config
		spec      loadgen.BodySpec
		headers   headerList
		pids      pidList
		bodyFile  string
		jsonOut   string
		chunkWait time.Duration
	)
	target := fs.String("url", "http://127.0.0.1:8080/v1/chat/completions", "target `URL` (default path /v1/embeddings with -embeddings)")
	fs.StringVar(&cfg.Token, "token", envToken, "bearer `token` (default $LOADGEN_TOKEN)")
	fs.Var(&headers, "header", "extra request header `Name:Value` (repeatable)")
	fs.StringVar(&bodyFile, "body", "", "request body `file` instead of a generated one")
	fs.StringVar(&spec.Model, "model", "", "model `name` (default mock-gpt, or mock-embed with -embeddings)")
	fs.IntVar(&spec.PromptWords, "prompt-words", 16, "words in the user message (or embeddings input)")
	fs.IntVar(&spec.HistoryKB, "history-kb", 0, "conversation history of about this many `KiB`")
	fs.BoolVar(&spec.MixedText, "history-mixed", false, "write the history as mixed text (quotes, newlines, code, non-ASCII); -history-kb then counts it as encoded, about the body size")
	fs.BoolVar(&spec.Stream, "stream", false, "stream the answer (SSE)")
	fs.BoolVar(&spec.IncludeUsage, "include-usage", false, "ask for a usage chunk (stream_options.include_usage); it must come exactly once")
	fs.IntVar(&cfg.Chunks, "chunks", 8, "content chunks each stream must carry (sent as mock.chunks)")
	fs.DurationVar(&chunkWait, "chunk-delay", 0, "mock pause between chunks (mock.chunk_delay_ms)")
	fs.IntVar(&spec.LatencyMS, "latency-ms", 0, "mock pause before the answer, in ms (mock.latency_ms)")
	fs.BoolVar(&spec.Embeddings, "embeddings", false, "send embeddings requests")
	fs.IntVar(&spec.Dims, "dims", 1536, "floats each embedding must have (sent as dimensions)")
	fs.IntVar(&cfg.Concurrency, "c", 8, "closed loop: concurrent workers")
	fs.DurationVar(&cfg.Duration, "d", 10*time.Second, "measured window (with -n: a cap, default 10m)")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "load before the measured window, not counted")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: requests per second")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", 1000, "open loop: cap on requests in flight (beyond it: dropped)")
	fs.IntVar(&cfg.Hold, "hold", 0, "hold this many streams open for -d (implies -stream)")
	fs.Int64Var(&cfg.Requests, "n", 0, "stop after this many measured requests")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "per-request timeout, to the end of the body")
	fs.Var(&pids, "pid", "sample CPU and memory of this `pid` (repeatable or comma list)")
	fs.StringVar(&jsonOut, "json", "", "write the report as JSON to `file` (- for stdout)")
	fs.BoolVar(&cfg.AllowRemote, "allow-remote", false, "allow a target that is not loopback")
	if err := fs.Parse(args); err != nil {
		return cfg, "", err
	}
	if fs.NArg() > 0 {
		return cfg, "", fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg.URL = *target
	if spec.Embeddings && !set["url"] {
		cfg.URL = strings.TrimSuffix(cfg.URL, "/chat/completions") + "/embeddings"
	}
	if cfg.Requests > 0 && !set["d"] {
		cfg.Duration = 10 * time.Minute
	}
	if cfg.Hold > 0 {
		spec.Stream = true
		cfg.Warmup = 0
	}
	if cfg.Rate > 0 || cfg.Hold > 0 {
		cfg.Concurrency = 0
	}
	cfg.Headers = headers
	cfg.PIDs = pids
	cfg.Stream = spec.Stream
	cfg.Embeddings = spec.Embeddings
	if spec.Embeddings {
		cfg.Chunks = 0
		cfg.Dims = spec.Dims
	} else {
		spec.Dims = 0
	}
	if spec.Stream {
		spec.Chunks = cfg.Chunks
		spec.ChunkDelayMS = int(chunkWait / time.Millisecond)
	} else {
		cfg.Chunks = 0
	}

	if bodyFile != "" {
		return fromFile(cfg, jsonOut, bodyFile, set)
	}
	if spec.Model == "" {
		spec.Model = "mock-gpt"
		if spec.Embeddings {
			spec.Model = "mock-embed"
		}
	}
	body, err := loadgen.BuildBody(spec)
	if err != nil {
		return cfg, "", fmt.Errorf("%w: %w", errUsage, err)
	}
	cfg.Body = body
	cfg.BodyInfo = spec
	return cfg, jsonOut, nil
}

// fromFile takes the body from a file. Generation flags would be silently
// ignored, so they are refused; stream and chunk count come from the file
// unless given.
func fromFile(cfg loadgen.Config, jsonOut, path string, set map[string]bool) (loadgen.Config, string, error) {
	for _, name := range []string{"model", "prompt-words", "history-kb", "history-mixed", "chunk-delay", "latency-ms"} {
		if set[name] {
			return cfg, "", fmt.Errorf("%w: -%s cannot be used with -body", errUsage, name)
		}
	}
	body, err := os.ReadFile(path)
	if err != nil {
		return cfg, "", fmt.Errorf("%w: read body: %w", errUsage, err)
	}
	if !gjson.ValidBytes(body) {
		return cfg, "", fmt.Errorf("%w: body %s is not valid JSON", errUsage, path)
	}
	stream := gjson.GetBytes(body, "stream").Bool()
	if set["stream"] && cfg.Stream != stream || cfg.Hold > 0 && !stream {
		return cfg, "", fmt.Errorf("%w: body %s has \"stream\": %v", errUsage, path, stream)
	}
	cfg.Stream = stream
	if stream && !set["chunks"] {
		cfg.Chunks = int(gjson.GetBytes(body, "mock.chunks").Int()) // 0: any number
	}
	cfg.Body = body
	cfg.BodyInfo = map[string]string{"file": path}
	return cfg, jsonOut, nil
}

// headerList is a repeatable -header Name:Value flag.
type headerList [][2]string

func (h *headerList) String() string { return fmt.Sprint(len(*h), " headers") }

func (h *headerList) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return fmt.Errorf("header %q: want Name:Value", v)
	}
	*h = append(*h, [2]string{name, strings.TrimSpace(value)})
	return nil
}

// pidList is a repeatable -pid flag that also takes comma lists.
type pidList []int

func (p *pidList) String() string { return fmt.Sprint([]int(*p)) }

func (p *pidList) Set(v string) error {
	for f := range strings.SplitSeq(v, ",") {
		pid, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || pid <= 0 {
			return fmt.Errorf("pid %q: want a positive number", f)
		}
		*p = append(*p, pid)
	}
	return nil
}
