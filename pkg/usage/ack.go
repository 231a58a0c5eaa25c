package usage

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/pkg/rawjson"
)

// Acks. The publisher publishes with the core client, each message with a
// reply subject of its own (an inbox, a dot and the publish's token), and
// reads the stream's acks itself. The JetStream client's asynchronous
// publish would decode every ack with encoding/json, through reflection,
// and arm a timer per publish, while the publisher keeps its own ack
// deadline per flight (AckTimeout). The subscription delivers the acks
// into a channel that Run selects on, so no goroutine of the client's
// stands between the socket and Run.
//
// An ack is matched to its flight by token. An ack that matches none (its
// flight timed out and was spooled, or the channel was full and the
// client dropped it as a slow consumer) changes nothing: the flight times
// out, is spooled and published again with its seq, and consumers drop the
// copy that is already on the stream.

// statusHdr and noResponders: the server's reply when no stream listens on
// the subject.
const (
	statusHdr    = "Status"
	noResponders = "503"
)

// errBadAck is an ack the publisher cannot read.
var errBadAck = errors.New("usage publish: unreadable ack")

type ackSub struct {
	ch     chan *nats.Msg
	sub    *nats.Subscription
	prefix string // reply subjects' prefix: an inbox and a dot
	next   uint64 // token of the last publish sent
	reply  []byte
}

// open subscribes to the replies; capacity bounds the acks waiting for Run.
func (a *ackSub) open(nc *nats.Conn, capacity int) error {
	a.prefix = nc.NewInbox() + "."
	a.ch = make(chan *nats.Msg, capacity)
	sub, err := nc.ChanSubscribe(a.prefix+"*", a.ch)
	if err != nil {
		return fmt.Errorf("subscribe to usage acks: %w", err)
	}
	a.sub = sub
	return nil
}

func (a *ackSub) close() {
	if a.sub != nil {
		_ = a.sub.Unsubscribe()
		a.sub = nil
	}
}

// replyTo returns the reply subject of the publish with this token.
func (a *ackSub) replyTo(token uint64) string {
	a.reply = strconv.AppendUint(append(a.reply[:0], a.prefix...), token, 36)
	return string(a.reply)
}

// token returns the token of the publish m replies to; false for a
// message that is no reply of ours.
func (a *ackSub) token(m *nats.Msg) (uint64, bool) {
	if len(m.Subject) <= len(a.prefix) || m.Subject[:len(a.prefix)] != a.prefix {
		return 0, false
	}
	t, err := strconv.ParseUint(m.Subject[len(a.prefix):], 36, 64)
	return t, err == nil
}

// parseAck reads a JetStream publish reply: the stream seq the message got
// (a duplicate's original seq), or why the publish failed.
func parseAck(m *nats.Msg) (uint64, error) {
	if len(m.Data) == 0 {
		if m.Header.Get(statusHdr) == noResponders {
			return 0, jetstream.ErrNoStreamResponse
		}
		return 0, errBadAck
	}
	var stream, seq, apiErr string
	rawjson.EachMember(unsafe.String(unsafe.SliceData(m.Data), len(m.Data)), func(k, v string, _ int) bool {
		switch k {
		case "stream":
			stream = v
		case "seq":
			seq = v
		case "error":
			apiErr = v
		}
		return true
	})
	if apiErr != "" {
		e := new(jetstream.APIError)
		if err := json.Unmarshal([]byte(apiErr), e); err != nil {
			return 0, errBadAck
		}
		return 0, e
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil || n == 0 || !rawjson.IsString(stream) || len(stream) == 2 {
		return 0, errBadAck
	}
	return n, nil
}
