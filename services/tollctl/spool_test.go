package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/natstest"
	"github.com/tollgate/tollgate/pkg/usage"
	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// TestSpoolRecover: a gateway's spool directory holding a request it began
// and never billed. --dry-run lists it and publishes nothing; recover
// publishes its recovered event once; a second recover publishes nothing.
func TestSpoolRecover(t *testing.T) {
	ns := natstest.Start(t)
	url := ns.ClientURL()
	js, err := jetstream.New(natstest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := usage.EnsureStream(ctx, js, usage.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gw, err := usage.NewPublisher(js, usage.Config{SpoolDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- gw.Run(ctx) }()
	id := usage.NewEventID(time.Now())
	gw.Begin(&usage.Begun{EventID: id, Timestamp: time.Now().UnixNano(), Dept: "eng", Team: "eng/web", RequestedModel: "gpt-4o",
		Stream: true, PromptTokens: 200, MaxCompletionTokens: 500, PromptCostNano: 500_000, OutputPerM: 10_000_000_000})
	gw.Progress(id, 120)
	deadline := time.Now().Add(10 * time.Second)
	for u, _ := usage.ReadUnfinished(dir); len(u) != 1 || u[0].CompletionTokens != 120; u, _ = usage.ReadUnfinished(dir) {
		if time.Now().After(deadline) {
			t.Fatalf("the begun record never reached the file: %v", u)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := gw.Close(ctx); err != nil { // the gateway is gone; its request was never billed
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}

	code, out, errOut := run1(t, nil, "spool", "recover", "--dir", dir, "--dry-run")
	// 120 tokens relayed, one interval more: 240 at $10/M, plus $0.0005.
	if code != 0 || !strings.Contains(out, id+" dept=eng team=eng/web model=gpt-4o stream=true prompt=200 completion=240 cost=0.0029 USD") ||
		!strings.Contains(out, "1 unfinished requests (dry run") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	if n := streamEvents(t, js); len(n) != 0 {
		t.Fatalf("the dry run published %d events", len(n))
	}
	if code, out, errOut := run1(t, nil, "spool", "recover", "--dir", dir, "--nats", url); code != 0 || !strings.Contains(out, "1 unfinished requests recovered") {
		t.Fatalf("recover: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := run1(t, nil, "spool", "recover", "--dir", dir, "--nats", url); code != 0 || !strings.Contains(out, "0 unfinished requests recovered") {
		t.Fatalf("second recover: exit %d\n%s%s", code, out, errOut)
	}
	evs := streamEvents(t, js)
	if len(evs) != 1 || evs[0].EventId != id || !evs[0].Recovered || !evs[0].Estimated || evs[0].CostNanoUsd != 2_900_000 {
		t.Fatalf("stream holds %v, want the one recovered event", evs)
	}
	if code, _, errOut := run1(t, nil, "spool", "recover"); code != 2 || !strings.Contains(errOut, "--dir is required") {
		t.Errorf("without --dir: exit %d %s", code, errOut)
	}
}

// streamEvents returns every event of the usage stream.
func streamEvents(t *testing.T, js jetstream.JetStream) []*usagev1.UsageEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, usage.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*usagev1.UsageEvent
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var b usagev1.UsageBatch
		if err := usage.DecodeMessage(m.Data, &b); err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Events...)
	}
	return out
}
