package usage

import (
	"errors"
	"strconv"
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
	subj := func() string { r.acks.next++; return r.acks.replyTo(r.acks.next) }
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

// TestFailedSendUsesNoToken: a publish the client refuses uses up no
// token, so the flights that follow keep consecutive tokens and their acks
// still find them.
func TestFailedSendUsesNoToken(t *testing.T) {
	srv := startServer(t)
	nc, _ := connect(t, srv, Config{})
	r := &runState{p: &Publisher{nc: nc}}
	r.ring.buf = make([]flight, 4)
	if err := r.acks.open(nc, 8); err != nil {
		t.Fatal(err)
	}
	defer r.acks.close()
	r.msg = nats.Msg{Subject: BatchSubject("token-test"), Data: []byte("x"), Header: nats.Header{}}
	send := func() (uint64, error) {
		r.msgID = []string{strconv.FormatUint(r.acks.next+1, 10)}
		r.msg.Header.Set(jetstream.MsgIDHeader, r.msgID[0])
		return r.send()
	}
	first, err := send()
	if err != nil || first != 1 {
		t.Fatalf("first send: token %d err %v", first, err)
	}
	r.ring.push(flight{token: first})
	big := r.msg.Data
	r.msg.Data = make([]byte, nc.MaxPayload()+1) // refused by the client
	if _, err := send(); err == nil {
		t.Fatal("a publish over max_payload was sent")
	}
	r.msg.Data = big
	second, err := send()
	if err != nil || second != 2 {
		t.Fatalf("send after a refused one: token %d err %v, want 2", second, err)
	}
	r.ring.push(flight{token: second})
	deadline := time.After(5 * time.Second)
	for !r.ring.at(1).done {
		select {
		case m := <-r.acks.ch:
			r.onAck(m)
		case <-deadline:
			t.Fatal("the ack of the publish after a refused one found no flight")
		}
	}
	if f := r.ring.at(1); f.err != nil || f.seq == 0 {
		t.Errorf("second flight: seq %d err %v", f.seq, f.err)
	}
}
