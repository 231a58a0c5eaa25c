package router_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/pkg/config"
	"github.com/tollgate/tollgate/pkg/router"
)

// The gateway's attempt loop: the primary target answers 500, the request
// falls back to another model.
func Example() {
	cfg := &config.Config{
		Providers: []config.Provider{{Name: "primary", Kind: "mock"}, {Name: "backup", Kind: "mock"}},
		Models: []config.Model{
			{Name: "chat", Targets: []config.Target{{Provider: "primary", Model: "big-model"}}, Fallbacks: []string{"chat-backup"}},
			{Name: "chat-backup", Targets: []config.Target{{Provider: "backup", Model: "other-model"}}},
		},
	}
	cfg.ApplyDefaults()
	r, err := router.New(cfg, router.Options{})
	if err != nil {
		panic(err)
	}

	plan := r.Plan("chat", nil, time.Now())
	defer plan.Release()
	for a := plan.Next(); a != nil; a = plan.Next() {
		a.Start()
		status := 200 // ... call a.Provider for a.Model, with a.Key if set ...
		if a.Provider == "primary" {
			status = 500
		}
		o := router.Classify(status, nil, nil, true)
		a.Done(o, 150*time.Millisecond)
		fmt.Printf("call %d: %s -> %s\n", a.Number, a.Deployment(), o.Class)
		if !plan.ShouldRetry(o) || plan.Backoff(context.Background()) != nil {
			break
		}
	}
	fmt.Println("attempts:", plan.Attempts(), "fallbacks:", plan.Fallbacks())
	// Output:
	// call 1: primary/big-model -> server_error
	// call 2: backup/other-model -> success
	// attempts: 2 fallbacks: [primary/big-model]
}
