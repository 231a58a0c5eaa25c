package usage

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	usagev1 "github.com/tollgate/tollgate/proto/tollgate/usage/v1"
)

// Begun records (issue #47). A gateway killed mid-request (SIGKILL, OOM, a
// node lost) never enqueues the request's usage event, yet the provider
// bills the call. So before the upstream call the gateway hands the
// publisher a Begun (Publisher.Begin), and while a stream runs, its
// progress (Publisher.Progress). Run keeps the requests begun and not yet
// finished in memory and writes them to the file "begun" in the spool
// directory with the spool's own writes: records go to the file in the step
// that flushes the spool (so within a tick, maxTick, of Begin: the page
// cache, which outlives a killed process) and to the disk with the spool's
// fsync (SyncInterval). A request that ends before its record was written
// never reaches the file; one whose record was written gets a "done"
// record once its own event has been placed (handed to NATS or appended to
// the spool), written after the spool's bytes. Nothing on the request path
// waits: Begin and Progress put a value on a bounded queue.
//
// On start (NewPublisher, and so `tollctl spool recover`), the requests in
// the file with no done record and whose event is not in the spool are
// billed: one event each, with the request's own event id, marked
// recovered and estimated, cost by Recovered's rule, appended to the spool
// and fsynced before the file is emptied. A second start finds the file
// empty; a start killed between the two finds the events in the spool and
// skips them. The file is rewritten with only the open requests when it
// grows (compaction forgets closed pairs).
const (
	journalName = "begun"
	// journalCompactAt is the file size from which the file is rewritten
	// with only the open requests, when they take less than a quarter of
	// it.
	journalCompactAt = 8 << 20
	// maxOpen bounds the requests tracked at once; a Begin beyond it is
	// counted in Stats.BegunDropped and its request is billed only by its
	// own event.
	maxOpen = 1 << 17
	// beginQueue is the capacity of the queue of Begin and Progress
	// values.
	beginQueue = 8192
	// begunAge is how long a request runs before its begun record is
	// written: most requests end sooner, and then nothing of them reaches
	// the file. In BenchmarkPublishBegun, writing every record (and its
	// done record) cost as much again as publishing the event.
	begunAge = 100 * time.Millisecond
)

// DefaultProgressInterval is how often the gateway records a stream's
// progress (Publisher.Progress), at most: a copy onto the Begin queue per
// stream, and a record of some 60 bytes in the begun file, twice a second.
const DefaultProgressInterval = 500 * time.Millisecond

// Record kinds of the begun file.
const (
	kindBegun    = 1
	kindProgress = 2
	kindDone     = 3
)

// Begun is what the gateway knows of a request when its upstream call
// begins: the fields of its usage event known then, and what the recovery
// rule bills from.
type Begun struct {
	EventID   string // the id its own event will carry
	RequestID string
	Timestamp int64 // the request's start, unix ns

	Issuer, Subject, KeyID, Dept, Team, Project string

	RequestedModel, ServedModel, Provider, Deployment, Route string
	Endpoint                                                 string
	PricingVersion                                           string
	Stream                                                   bool

	// PromptTokens is the prompt's token count as admission estimated it.
	PromptTokens uint64
	// MaxCompletionTokens is the output the request may generate (its
	// output limit times its choices), 0 when unknown.
	MaxCompletionTokens uint64
	// ReservedNano is the budget reservation, nano-USD; 0 when none.
	ReservedNano int64
	// PromptCostNano is the cost of PromptTokens (and any per-request
	// price), nano-USD.
	PromptCostNano int64
	// OutputPerM is the output price, nano-USD per million tokens.
	OutputPerM int64
}

// jentry is one value on the Begin queue: a Begun, or a progress report
// (only b.EventID set).
type jentry struct {
	kind   uint8
	tokens uint64
	b      Begun
}

// openReq is a request begun and not yet finished, as Run tracks it.
type openReq struct {
	b           Begun
	tokens      uint64 // completion tokens relayed at the last progress
	prev        uint64 // at the progress before
	written     bool   // its begun record is in the file
	dirty       bool   // progress not yet written
	queued      bool   // in journal.pending
	closed      bool
	recordBytes int64 // bytes of its records in the file
}

// journal is the begun file and the open requests. Owned by Run.
type journal struct {
	dir     string
	f       *os.File
	size    int64 // bytes in the file
	live    int64 // bytes of the open requests' records
	crc     *crc32.Table
	open    map[string]*openReq
	pending []*openReq // begun or progressed since the last write
	free    []*openReq // closed and out of pending: reused by begin
	buf     []byte
	scratch []byte
	dirty   bool // written since the last fsync
	err     error
}

// Recovered returns the usage event Run publishes for a request begun and
// never finished (the recovery rule, docs/usage-recovery.md):
//
//   - prompt tokens: admission's estimate (PromptTokens);
//   - completion tokens: for a stream, those relayed at its last progress
//     record plus as many as in the interval before it (the tail written
//     after the last record is at most one interval at the stream's rate),
//     at most MaxCompletionTokens when known; for any other request, whose
//     answer nobody saw, MaxCompletionTokens (what its reservation covered);
//   - cost: PromptCostNano plus the completion tokens at OutputPerM, at
//     most ReservedNano when there was a reservation (for a non-stream,
//     ReservedNano itself when there was one).
//
// The event is marked recovered and estimated, status 0 with error type
// "gateway_lost".
func Recovered(b *Begun, tokens, prev uint64) *usagev1.UsageEvent {
	completion := tokens
	if b.Stream {
		completion = satAdd(tokens, tokens-min(prev, tokens))
		if b.MaxCompletionTokens > 0 {
			completion = min(completion, b.MaxCompletionTokens)
		}
	} else {
		completion = b.MaxCompletionTokens
	}
	cost := satAddInt(b.PromptCostNano, outputCost(completion, b.OutputPerM))
	switch {
	case !b.Stream && b.ReservedNano > 0:
		cost = b.ReservedNano
	case b.ReservedNano > 0:
		cost = min(cost, b.ReservedNano)
	}
	return &usagev1.UsageEvent{
		EventId:          b.EventID,
		RequestId:        b.RequestID,
		Timestamp:        b.Timestamp,
		Issuer:           b.Issuer,
		Subject:          b.Subject,
		KeyId:            b.KeyID,
		Dept:             b.Dept,
		Team:             b.Team,
		Project:          b.Project,
		RequestedModel:   b.RequestedModel,
		ServedModel:      b.ServedModel,
		Provider:         b.Provider,
		Deployment:       b.Deployment,
		Route:            b.Route,
		Attempts:         1,
		PromptTokens:     b.PromptTokens,
		CompletionTokens: completion,
		Estimated:        true,
		Recovered:        true,
		CostNanoUsd:      cost,
		PricingVersion:   b.PricingVersion,
		Endpoint:         b.Endpoint,
		Stream:           b.Stream,
		ErrorType:        ErrorGatewayLost,
	}
}

// ErrorGatewayLost is the error type of a recovered event: the gateway
// serving the request ended before it could record it.
const ErrorGatewayLost = "gateway_lost"

func satAdd(a, b uint64) uint64 {
	s, c := bits.Add64(a, b, 0)
	if c != 0 {
		return math.MaxUint64
	}
	return s
}

func satAddInt(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// outputCost is tokens at perM nano-USD per million, rounded half up.
func outputCost(tokens uint64, perM int64) int64 {
	if perM <= 0 || tokens == 0 {
		return 0
	}
	hi, lo := bits.Mul64(tokens, uint64(perM))
	lo, c := bits.Add64(lo, 500_000, 0)
	hi += c
	if hi >= 1_000_000 {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, 1_000_000)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// openJournal opens the begun file in dir, for appending, and reads the
// requests it holds open.
func openJournal(dir string) (*journal, map[string]*openReq, error) {
	j := &journal{dir: dir, crc: crc32.MakeTable(crc32.Castagnoli), open: make(map[string]*openReq)}
	found, err := j.read()
	if err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, journalName), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, nil, fmt.Errorf("open begun file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("open begun file: %w", err)
	}
	j.f, j.size = f, st.Size()
	return j, found, nil
}

// read returns the requests of the begun file with no done record. A torn
// or damaged record is skipped.
func (j *journal) read() (map[string]*openReq, error) {
	found := make(map[string]*openReq)
	data, err := os.ReadFile(filepath.Join(j.dir, journalName))
	if errors.Is(err, os.ErrNotExist) {
		return found, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read begun file: %w", err)
	}
	for off := 0; off+recHeader <= len(data); {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		end := off + recHeader + n
		if n == 0 || n > maxRecord || end > len(data) ||
			crc32.Checksum(data[off+recHeader:end], j.crc) != binary.LittleEndian.Uint32(data[off+4:]) {
			off++ // resynchronise on the next intact record
			continue
		}
		applyJournalRecord(found, data[off+recHeader:end])
		off = end
	}
	return found, nil
}

// applyJournalRecord applies one record of the begun file to open.
func applyJournalRecord(open map[string]*openReq, p []byte) {
	if len(p) < 1 {
		return
	}
	kind := p[0]
	var b Begun
	var id string
	var tokens, prev uint64
	var ev []byte
	rest := p[1:]
	for len(rest) > 0 {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return
		}
		rest = rest[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return
			}
			if kind == kindBegun {
				ev = v
			} else {
				id = string(v)
			}
			rest = rest[n:]
			continue
		case typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(rest)
			if n < 0 {
				return
			}
			switch num {
			case 2:
				tokens = v
			case 3:
				prev = v
			case 4:
				b.MaxCompletionTokens = v
			case 5:
				b.ReservedNano = int64(v)
			case 6:
				b.PromptCostNano = int64(v)
			case 7:
				b.OutputPerM = int64(v)
			}
			rest = rest[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, rest)
		if n < 0 {
			return
		}
		rest = rest[n:]
	}
	switch kind {
	case kindBegun:
		var e usagev1.UsageEvent
		if e.UnmarshalVT(ev) != nil || e.EventId == "" {
			return
		}
		b.EventID, b.RequestID, b.Timestamp = e.EventId, e.RequestId, e.Timestamp
		b.Issuer, b.Subject, b.KeyID = e.Issuer, e.Subject, e.KeyId
		b.Dept, b.Team, b.Project = e.Dept, e.Team, e.Project
		b.RequestedModel, b.ServedModel, b.Provider = e.RequestedModel, e.ServedModel, e.Provider
		b.Deployment, b.Route, b.Endpoint = e.Deployment, e.Route, e.Endpoint
		b.PricingVersion, b.Stream, b.PromptTokens = e.PricingVersion, e.Stream, e.PromptTokens
		open[b.EventID] = &openReq{b: b, tokens: tokens, prev: prev}
	case kindProgress:
		if o := open[id]; o != nil && tokens >= o.tokens {
			o.tokens, o.prev = tokens, prev
		}
	case kindDone:
		delete(open, id)
	}
}

// begin tracks a request the gateway began.
func (j *journal) begin(b *Begun) bool {
	if len(j.open) >= maxOpen || b.EventID == "" {
		return false
	}
	if _, dup := j.open[b.EventID]; dup {
		return true
	}
	var o *openReq
	if n := len(j.free); n > 0 {
		o, j.free = j.free[n-1], j.free[:n-1]
		*o = openReq{b: *b, queued: true}
	} else {
		o = &openReq{b: *b, queued: true}
	}
	j.open[b.EventID] = o
	j.pending = append(j.pending, o)
	return true
}

// progress records that id's stream relayed tokens so far.
func (j *journal) progress(id string, tokens uint64) {
	o := j.open[id]
	if o == nil || tokens <= o.tokens {
		return
	}
	o.prev, o.tokens = o.tokens, tokens
	if o.written {
		o.dirty = true
	}
	if !o.queued {
		o.queued = true
		j.pending = append(j.pending, o)
	}
}

// done closes id: its own event was placed. A request whose begun record
// was never written leaves no trace in the file.
func (j *journal) done(id string) {
	o := j.open[id]
	if o == nil {
		return
	}
	delete(j.open, id)
	o.closed = true
	defer j.release(o)
	if o.written {
		j.live -= o.recordBytes
		j.scratch = append(j.scratch[:0], kindDone)
		j.scratch = protowire.AppendTag(j.scratch, 1, protowire.BytesType)
		j.scratch = protowire.AppendString(j.scratch, id)
		j.append(j.scratch)
	}
}

// release keeps a closed request for reuse once nothing refers to it (it
// left pending), up to maxFree of them.
func (j *journal) release(o *openReq) {
	if o.closed && !o.queued && len(j.free) < maxFree {
		*o = openReq{}
		j.free = append(j.free, o)
	}
}

// maxFree bounds the closed requests kept for reuse.
const maxFree = 4096

// append frames one record into the write buffer.
func (j *journal) append(p []byte) int64 {
	j.buf = binary.LittleEndian.AppendUint32(j.buf, uint32(len(p)))
	j.buf = binary.LittleEndian.AppendUint32(j.buf, crc32.Checksum(p, j.crc))
	j.buf = append(j.buf, p...)
	return int64(recHeader + len(p))
}

// encodeBegun returns o's begun record (with its progress) in j.scratch.
func (j *journal) encodeBegun(o *openReq) []byte {
	b := &o.b
	ev := usagev1.UsageEvent{
		EventId: b.EventID, RequestId: b.RequestID, Timestamp: b.Timestamp,
		Issuer: b.Issuer, Subject: b.Subject, KeyId: b.KeyID, Dept: b.Dept, Team: b.Team, Project: b.Project,
		RequestedModel: b.RequestedModel, ServedModel: b.ServedModel, Provider: b.Provider,
		Deployment: b.Deployment, Route: b.Route, Endpoint: b.Endpoint,
		PricingVersion: b.PricingVersion, Stream: b.Stream, PromptTokens: b.PromptTokens,
	}
	s := append(j.scratch[:0], kindBegun)
	s = protowire.AppendTag(s, 1, protowire.BytesType)
	size := ev.SizeVT()
	s = protowire.AppendVarint(s, uint64(size))
	n := len(s)
	s = slices.Grow(s, size)[:n+size]
	if _, err := ev.MarshalToSizedBufferVT(s[n:]); err != nil {
		return nil
	}
	for _, f := range [...]struct {
		num protowire.Number
		v   uint64
	}{{2, o.tokens}, {3, o.prev}, {4, b.MaxCompletionTokens}, {5, uint64(max(b.ReservedNano, 0))},
		{6, uint64(max(b.PromptCostNano, 0))}, {7, uint64(max(b.OutputPerM, 0))}} {
		if f.v != 0 {
			s = protowire.AppendTag(s, f.num, protowire.VarintType)
			s = protowire.AppendVarint(s, f.v)
		}
	}
	j.scratch = s
	return s
}

func (j *journal) encodeProgress(o *openReq) []byte {
	s := append(j.scratch[:0], kindProgress)
	s = protowire.AppendTag(s, 1, protowire.BytesType)
	s = protowire.AppendString(s, o.b.EventID)
	s = protowire.AppendTag(s, 2, protowire.VarintType)
	s = protowire.AppendVarint(s, o.tokens)
	s = protowire.AppendTag(s, 3, protowire.VarintType)
	s = protowire.AppendVarint(s, o.prev)
	j.scratch = s
	return s
}

// flush writes the records of the pending requests still open, and the
// done records, to the file: called after the spool's bytes were written,
// so a done record never reaches the file before the event it closes.
//
// A request begun less than begunAge before now (by its Timestamp) stays
// pending.
func (j *journal) flush(now time.Time) error {
	young := now.Add(-begunAge).UnixNano()
	keep := j.pending[:0]
	for _, o := range j.pending {
		switch {
		case o.closed:
			o.queued = false
			j.release(o)
			continue
		case !o.written && o.b.Timestamp > young:
			keep = append(keep, o)
			continue
		case !o.written:
			if p := j.encodeBegun(o); p != nil {
				o.recordBytes = j.append(p)
				j.live += o.recordBytes
				o.written = true
			}
		case o.dirty:
			n := j.append(j.encodeProgress(o))
			o.recordBytes += n
			j.live += n
		}
		o.dirty = false
		o.queued = false
	}
	clear(j.pending[len(keep):])
	j.pending = keep
	if len(j.buf) == 0 {
		return nil
	}
	_, err := j.f.WriteAt(j.buf, j.size)
	if err != nil {
		return j.report(fmt.Errorf("write begun file: %w", err))
	}
	j.size += int64(len(j.buf))
	j.buf = j.buf[:0]
	j.dirty = true
	if j.size >= journalCompactAt && j.live < j.size/4 {
		return j.report(j.compact())
	}
	return nil
}

// report returns err unless it repeats the last one reported.
func (j *journal) report(err error) error {
	if err == nil || j.err != nil && err.Error() == j.err.Error() {
		return nil
	}
	j.err = err
	return err
}

// sync fsyncs what flush wrote.
func (j *journal) sync() error {
	if !j.dirty {
		return nil
	}
	j.dirty = false
	if err := j.f.Sync(); err != nil {
		return j.report(fmt.Errorf("sync begun file: %w", err))
	}
	return nil
}

// compact rewrites the file with the open requests' records only.
func (j *journal) compact() error {
	j.buf = j.buf[:0]
	j.live = 0
	for _, o := range j.open {
		if !o.written {
			continue
		}
		o.recordBytes = j.append(j.encodeBegun(o))
		o.dirty = false
		j.live += o.recordBytes
	}
	if err := writeFileAtomic(j.dir, journalName, j.buf, true); err != nil {
		j.buf = j.buf[:0]
		return fmt.Errorf("compact begun file: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(j.dir, journalName), os.O_RDWR, 0)
	if err != nil {
		j.buf = j.buf[:0]
		return fmt.Errorf("compact begun file: %w", err)
	}
	_ = j.f.Close()
	j.f, j.size, j.dirty = f, int64(len(j.buf)), false
	j.buf = j.buf[:0]
	return nil
}

// reset empties the file durably (after recovery).
func (j *journal) reset() error {
	if err := j.f.Truncate(0); err != nil {
		return fmt.Errorf("reset begun file: %w", err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("reset begun file: %w", err)
	}
	j.size, j.live, j.dirty = 0, 0, false
	return nil
}

// close writes what is buffered and fsyncs the file.
func (j *journal) close() error {
	err := j.flush(time.Unix(0, math.MaxInt64))
	if serr := j.sync(); err == nil {
		err = serr
	}
	if cerr := j.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close begun file: %w", cerr)
	}
	return err
}

// recoverBegun publishes (through the spool) one event for each request of
// found, the begun file's open requests at start, whose own event is not in
// the spool, and returns how many. The events are appended to the spool
// and fsynced before their done records are written; a start killed in
// between finds them in the spool next time.
func (r *runState) recoverBegun(found map[string]*openReq) (int, error) {
	if len(found) == 0 {
		return 0, nil
	}
	if err := r.spool.dropSpooled(found); err != nil {
		return 0, err
	}
	evs := make([]*usagev1.UsageEvent, 0, len(found))
	j := r.p.journal
	for id, o := range found {
		o.written, o.recordBytes = true, 0
		j.open[id] = o
		evs = append(evs, Recovered(&o.b, o.tokens, o.prev))
	}
	slices.SortFunc(evs, func(a, b *usagev1.UsageEvent) int {
		return cmp.Or(cmp.Compare(a.Timestamp, b.Timestamp), cmp.Compare(a.EventId, b.EventId))
	})
	for _, ev := range evs {
		r.add(ev, true)
	}
	r.form(true)
	r.p.queued.Add(int64(len(evs)))
	r.p.recovered.Add(int64(len(evs)))
	if err := r.spool.sync(); err != nil {
		return len(evs), err
	}
	if len(j.open) > 0 {
		// Held in the backlog (the spool is full): their done records
		// are written once they are placed.
		return len(evs), nil
	}
	if err := j.flush(r.cfg.Clock()); err != nil {
		return len(evs), err
	}
	return len(evs), j.compact()
}

// dropSpooled removes from found the requests whose event is in the spool.
func (s *spool) dropSpooled(found map[string]*openReq) error {
	var b usagev1.UsageBatch
	for i := range s.segs {
		err := s.eachRecord(i, 0, func(payload []byte) bool {
			if DecodeMessage(payload, &b) != nil {
				return true
			}
			for _, ev := range b.Events {
				delete(found, ev.GetEventId())
			}
			return len(found) > 0
		})
		if err != nil || len(found) == 0 {
			return err
		}
	}
	return nil
}

// Unfinished is a request of a spool directory's begun file with no done
// record: what a start would recover unless its event is in the spool.
type Unfinished struct {
	Begun
	// CompletionTokens is the progress last recorded, PrevTokens the one
	// before it.
	CompletionTokens, PrevTokens uint64
}

// ReadUnfinished returns the requests of dir's begun file with no done
// record, oldest first. It reads the file only, without changing anything
// (`tollctl spool recover --dry-run`).
func ReadUnfinished(dir string) ([]Unfinished, error) {
	j := &journal{dir: dir, crc: crc32.MakeTable(crc32.Castagnoli)}
	found, err := j.read()
	if err != nil {
		return nil, err
	}
	out := make([]Unfinished, 0, len(found))
	for _, o := range found {
		out = append(out, Unfinished{Begun: o.b, CompletionTokens: o.tokens, PrevTokens: o.prev})
	}
	slices.SortFunc(out, func(a, b Unfinished) int {
		return cmp.Or(cmp.Compare(a.Timestamp, b.Timestamp), cmp.Compare(a.EventID, b.EventID))
	})
	return out, nil
}
