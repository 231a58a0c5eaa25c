// Command mockllm runs the deterministic mock LLM upstream (package
// pkg/mockllm) on a TCP listener until SIGTERM or interrupt.
//
// The listen address is -listen, else $MOCKLLM_LISTEN, else 127.0.0.1:9999.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tollgate/tollgate/pkg/mockllm"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mockllm:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	listen := "127.0.0.1:9999"
	if v := os.Getenv("MOCKLLM_LISTEN"); v != "" {
		listen = v
	}
	fs := flag.NewFlagSet("mockllm", flag.ContinueOnError)
	fs.StringVar(&listen, "listen", listen, "listen address (env MOCKLLM_LISTEN)")
	chunks := fs.Int("chunks", 8, "content chunks per streamed answer, words per non-stream answer")
	chunkDelay := fs.Duration("chunk-delay", 0, "wait before each content chunk after the first")
	latency := fs.Duration("latency", 0, "wait before each response header")
	dims := fs.Int("dims", 1536, "embedding dimensions when a request names none")
	if err := fs.Parse(args); err != nil {
		return err
	}

	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	srv := mockllm.New(mockllm.Config{
		Chunks:     *chunks,
		ChunkDelay: *chunkDelay,
		Latency:    *latency,
		Dims:       *dims,
		Logger:     log,
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Serve(ln) })
	g.Go(func() error {
		<-ctx.Done()
		start := time.Now()
		err := srv.Shutdown()
		log.Info("mock llm stopped", "took", time.Since(start))
		return err
	})
	log.Info("mock llm listening", "addr", ln.Addr().String())
	return g.Wait()
}
