package usage

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestParseAck reads the replies a real server sends to publishes: a
// stored message, a duplicate (the original's seq), a refused one (an API
// error), one that no stream listens for (no responders), and replies
// that are no ack.
func TestParseAck(t *testing.T) {
	srv := startServer(t)
	nc, _ := connect(t, srv, Config{})
	reply := func(subject, msgID string, hdr nats.Header) *nats.Msg {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Data = []byte("x")
		for k, v := range hdr {
			m.Header[k] = v
		}
		if msgID != "" {
			m.Header.Set(jetstream.MsgIDHeader, msgID)
		}
		r, err := nc.RequestMsg(m, 2*time.Second)
		if err != nil && !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("request %s: %v", subject, err)
		}
		return r
	}
	subject := BatchSubject("ack-test")
	first, err := parseAck(reply(subject, "a-1", nil))
	if err != nil || first == 0 {
		t.Fatalf("stored message: seq %d err %v", first, err)
	}
	if seq, err := parseAck(reply(subject, "a-2", nil)); err != nil || seq != first+1 {
		t.Errorf("next message: seq %d err %v, want %d", seq, err, first+1)
	}
	if seq, err := parseAck(reply(subject, "a-1", nil)); err != nil || seq != first {
		t.Errorf("duplicate: seq %d err %v, want the original's %d", seq, err, first)
	}
	_, err = parseAck(reply(subject, "a-3", nats.Header{"Nats-Expected-Stream": {"NOT_THIS_ONE"}}))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != 400 || apiErr.Description == "" {
		t.Errorf("refused publish: %v (%T), want an API error with code 400", err, err)
	}
	// No stream listens: the client's request sees no responders, and a
	// reply subject of ours gets the server's 503 status message.
	// The publisher's subscription delivers into a channel, as here.
	ch := make(chan *nats.Msg, 1)
	if _, err := nc.ChanSubscribe("ack-test-inbox", ch); err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: "not.a.stream", Reply: "ack-test-inbox", Data: []byte("x"), Header: nats.Header{}}); err != nil {
		t.Fatal(err)
	}
	var m *nats.Msg
	select {
	case m = <-ch:
	case <-time.After(2 * time.Second):
		t.Fatal("no reply for a subject without a stream")
	}
	if _, err := parseAck(m); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("no responders: %v, want %v", err, jetstream.ErrNoStreamResponse)
	}
	for _, data := range []string{"", "{}", `{"stream":"S"}`, `{"stream":"S","seq":0}`, `{"seq":5}`, `{"stream":"S","seq":-1}`, "not json", `{"error":{"code":"x"}}`} {
		if seq, err := parseAck(&nats.Msg{Data: []byte(data)}); err == nil {
			t.Errorf("reply %q: read as seq %d", data, seq)
		}
	}
}

// TestAcksMatchFlights: acks are matched to their flights by token,
// whatever their order; an ack for a flight no longer in the ring, for a
// token never sent, or on another subject changes nothing.
func TestAcksMatchFlights(t *testing.T) {
	r := &runState{}
	r.ring.buf = make([]flight, 8)
	r.acks.prefix = "_INBOX.test."
	subj := func() string { s, _ := r.acks.replyTo(); return s }
	var subjects []string
	for range 4 {
		s := subj()
		subjects = append(subjects, s)
		r.ring.push(flight{token: r.acks.next})
	}
	ack := func(subject, data string) { r.onAck(&nats.Msg{Subject: subject, Data: []byte(data)}) }
	ack(subjects[2], `{"stream":"S","seq":30}`)
	ack(subjects[1], `{"stream":"S","seq":20}`)
	ack("_INBOX.other."+subjects[0][len(r.acks.prefix):], `{"stream":"S","seq":99}`)
	ack(r.acks.prefix+"zz", `{"stream":"S","seq":98}`)
	if f := r.ring.front(); f.done {
		t.Fatal("the first flight was settled by an ack that is not its own")
	}
	for i, want := range []uint64{0, 20, 30, 0} {
		if f := r.ring.at(i); f.done != (want != 0) || f.seq != want {
			t.Errorf("flight %d: done %v seq %d, want seq %d", i, f.done, f.seq, want)
		}
	}
	r.ring.pop() // the first flight timed out
	ack(subjects[0], `{"stream":"S","seq":10}`)
	ack(subjects[3], `{"stream":"S","seq":40}`)
	ack(subjects[3], `{"stream":"S","seq":41}`) // a second reply for one publish
	for i, want := range []uint64{20, 30, 40} {
		if f := r.ring.at(i); !f.done || f.seq != want {
			t.Errorf("after the timeout, flight %d: done %v seq %d, want %d", i, f.done, f.seq, want)
		}
	}
}
