package owner

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tollgate/tollgate/pkg/natstest"
)

type wgGroup struct{ wg *sync.WaitGroup }

func (g wgGroup) Go(f func() error) { g.wg.Go(func() { _ = f() }) }

func start(t *testing.T, js jetstream.JetStream) *Store {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	s, err := Start(ctx, wgGroup{&wg}, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStore records owners on one store and reads them on another on the
// same bucket (a second gateway, or this one restarted).
func TestStore(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := start(t, js)
	alice := Owner{Dept: "research", Subject: "alice"}
	if err := a.Record(ctx, File, "file-1", alice); err != nil {
		t.Fatal(err)
	}
	if err := a.Record(ctx, File, "file-1", Owner{Dept: "finance", Subject: "bob"}); !errors.Is(err, ErrRecorded) {
		t.Fatalf("a second record: %v, want ErrRecorded", err)
	}
	if o, ok := a.Known(File, "file-1"); !ok || !o.Is("research", "alice") || o.Is("research", "carol") {
		t.Errorf("Known = %+v %v", o, ok)
	}
	if _, ok := a.Known(Batch, "file-1"); ok {
		t.Error("a file's record answers for a batch of the same id")
	}
	b := start(t, js)
	if o, ok := b.Known(File, "file-1"); !ok || !o.Is("research", "alice") {
		t.Errorf("the second store loaded %+v %v", o, ok)
	}
	// Written by a after b loaded: b finds it in the bucket on a miss.
	if err := a.Record(ctx, Batch, "batch/../x?y", alice); err != nil {
		t.Fatal(err)
	}
	if o, ok, err := b.Owner(ctx, Batch, "batch/../x?y"); err != nil || !ok || !o.Is("research", "alice") {
		t.Errorf("Owner on the second store: %+v %v %v", o, ok, err)
	}
	if _, ok, err := b.Owner(ctx, File, "file-none"); ok || err != nil {
		t.Errorf("an unknown id: %v %v", ok, err)
	}
	if err := b.Forget(ctx, File, "file-1"); err != nil {
		t.Fatal(err)
	}
	// On the store that forgot it at once (others once their watch
	// delivers the delete; the owner is the same until then).
	if _, ok, err := b.Owner(ctx, File, "file-1"); ok || err != nil {
		t.Errorf("a forgotten file: %v %v", ok, err)
	}
}
