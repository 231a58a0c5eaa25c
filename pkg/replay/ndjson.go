package replay

import (
	"bufio"
	"context"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protojson"
)

// NDJSON writes each event as one line of protojson (proto field names,
// zero fields included).
type NDJSON struct {
	w   *bufio.Writer
	opt protojson.MarshalOptions
}

// NewNDJSON returns a sink writing to w.
func NewNDJSON(w io.Writer) *NDJSON {
	return &NDJSON{w: bufio.NewWriter(w), opt: protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}}
}

// Write writes the events' lines.
func (n *NDJSON) Write(_ context.Context, items []Item) error {
	for i := range items {
		b, err := n.opt.Marshal(items[i].Event)
		if err != nil {
			return fmt.Errorf("encode event %d: %w", items[i].Seq, err)
		}
		n.w.Write(b)
		if err := n.w.WriteByte('\n'); err != nil {
			return fmt.Errorf("write ndjson: %w", err)
		}
	}
	return nil
}

// Close flushes the output.
func (n *NDJSON) Close(context.Context) error {
	if err := n.w.Flush(); err != nil {
		return fmt.Errorf("write ndjson: %w", err)
	}
	return nil
}
