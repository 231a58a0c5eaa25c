package budget

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/usage"
)

const (
	// Bucket is the KV bucket of spend totals, one key per TotalID (see
	// TotalID for the key scheme); each value is a proto-encoded
	// tollgate.usage.v1.SpendTotal.
	Bucket = "tollgate_spend"
	// AlertBucket remembers which alert thresholds each total has crossed,
	// under the same keys as Bucket, so that a restart never alerts twice.
	// Each value is a JSON object from limit (nano-USD, decimal string) to
	// the highest threshold alerted, in parts per million.
	AlertBucket = "tollgate_spend_alerts"
	// Stream is the usage stream the Consumer reads (usage.StreamName).
	Stream = usage.StreamName
	// Durable is the name of the budget consumer on Stream.
	Durable = "budget"
)

// EnsureBucket creates the spend, alert and dedup buckets, or updates their
// configuration, with the given number of replicas (default 1), and returns
// the spend bucket.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	if replicas <= 0 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "Tollgate spend totals per scope, value and period",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure bucket %s: %w", Bucket, err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      AlertBucket,
		Description: "Tollgate budget alert thresholds already announced",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}); err != nil {
		return nil, fmt.Errorf("ensure bucket %s: %w", AlertBucket, err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      DedupBucket,
		Description: "Tollgate budget consumer: usage batches applied per producer",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}); err != nil {
		return nil, fmt.Errorf("ensure bucket %s: %w", DedupBucket, err)
	}
	return kv, nil
}
