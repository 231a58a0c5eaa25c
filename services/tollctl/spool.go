package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/pflag"

	"github.com/tollgate/tollgate/pkg/pricing"
	"github.com/tollgate/tollgate/pkg/usage"
)

// setupSpoolRecover is `tollctl spool recover`: the usage events a gateway
// that never comes back left in its spool directory (docs/usage-recovery.md).
// It opens the directory as that gateway's publisher would on its next
// start: the requests it began and never billed get their recovered
// events, and everything the spool holds is published, exactly once.
func setupSpoolRecover(a *app, fs *pflag.FlagSet) func([]string) error {
	var nf natsFlags
	nf.register(a, fs)
	dir := fs.String("dir", "", "the gateway's spool directory (usage.spool_dir); required")
	dry := fs.Bool("dry-run", false, "list the unfinished requests without publishing or changing anything")
	wait := fs.Duration("wait", time.Minute, "how long to wait for the stream to take the spooled events")
	return func(args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
		}
		if *dir == "" {
			return fmt.Errorf("%w: --dir is required", errUsage)
		}
		if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
			return fmt.Errorf("spool directory %s: not a directory (%v)", *dir, err)
		}
		if *dry {
			return a.listUnfinished(*dir)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		nc, js, err := nf.connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		p, err := usage.NewPublisher(js, usage.Config{SpoolDir: *dir}, slog.New(slog.DiscardHandler))
		if err != nil {
			return err
		}
		ran := make(chan error, 1)
		go func() { ran <- p.Run(ctx) }()
		deadline := time.Now().Add(*wait)
		for st := p.Stats(); st.SpoolBytes > 0 || st.Pending > 0 || st.QueueLen > 0; st = p.Stats() {
			if time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(p.Close(cctx), <-ran)
		st := p.Stats()
		fmt.Fprintf(a.stdout, "producer %s: %d unfinished requests recovered; %d spooled events published; %d bytes left in the spool\n",
			p.ProducerID(), st.Recovered, st.Drained, st.SpoolBytes)
		if err != nil {
			return err
		}
		if st.SpoolBytes > 0 {
			return fmt.Errorf("the stream did not take every spooled event within --wait %s; run again to publish the rest", *wait)
		}
		return nil
	}
}

// listUnfinished prints the requests of dir's begun file with no done
// record, as a start would bill them (unless their own event is in the
// spool).
func (a *app) listUnfinished(dir string) error {
	us, err := usage.ReadUnfinished(dir)
	if err != nil {
		return err
	}
	for i := range us {
		u := &us[i]
		ev := usage.Recovered(&u.Begun, u.CompletionTokens, u.PrevTokens)
		fmt.Fprintf(a.stdout, "%s %s dept=%s team=%s model=%s stream=%v prompt=%d completion=%d cost=%s USD\n",
			time.Unix(0, u.Timestamp).UTC().Format(time.RFC3339), u.EventID, u.Dept, u.Team, u.RequestedModel, u.Stream,
			ev.PromptTokens, ev.CompletionTokens, pricing.FormatUSD(ev.CostNanoUsd))
	}
	fmt.Fprintf(a.stdout, "%d unfinished requests (dry run: nothing published)\n", len(us))
	return nil
}
