package usage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"
)

// Producer identity and batch numbering (issue #13).
//
// A publisher is one producer. Its id lives in the spool directory, in the
// file "producer", written once (temp file, fsync, rename, fsync of the
// directory); a spool directory without it gets a fresh id, so a lost
// spool means a new producer, whose seqs start again at 1.
//
// Batch seqs are never reused, across a clean stop, a SIGKILL and a machine
// crash. Two files next to the id keep the numbering:
//
//   - "seq" holds the last seq assigned, with the producer id and the
//     kernel's boot id. It is overwritten in place (a few dozen bytes at
//     offset 0, no fsync; a copy into the file's shared mapping on Linux,
//     else a pwrite: see seqFile) each time a batch gets its seq, before
//     the batch is published or spooled. The page cache survives a
//     SIGKILL, so after one the file is exact (or torn, and then its
//     checksum fails and the ceiling is taken); after a machine crash it
//     may be stale, which the boot id tells: it differs from the running
//     kernel's.
//   - "seq.ceiling" holds a seq reserved durably (written like "producer")
//     ahead of use: no seq above it is assigned before the file says so.
//     It is raised by ceilingBlock at a time, so it costs one fsync per
//     ceilingBlock batches, made by the Run goroutine (events wait in the
//     queue meanwhile; no request does), the first one when the publisher
//     opens. A clean Close lowers it to the last seq assigned and marks it
//     exact.
//
// On start, the last seq assigned is taken as the highest of: "seq" when it
// was written during the running boot (else the ceiling, and when the
// ceiling is not exact, the first batch is marked resumed: seqs between the
// last one really used and the ceiling were reserved, never used), the
// highest seq of this producer in the spool, and the seq of the last batch
// on the stream under BatchSubject(id) when NATS answers at start. The next
// batch gets that plus one. Without a boot id (not Linux) "seq" is never
// trusted, so a restart after a SIGKILL continues above the ceiling.
const (
	producerName = "producer"
	seqName      = "seq"
	ceilingName  = "seq.ceiling"
	// ceilingBlock is how many seqs a ceiling raise reserves.
	ceilingBlock = 1024
	// seqFileSize: magic u32, seq u64, exact u8 (ceiling only), boot id
	// [16]byte, id length u8, id [maxProducerID]byte, crc32c u32.
	seqFileSize = 4 + 8 + 1 + 16 + 1 + maxProducerID + 4
	seqMagic    = 0x71657331 // "seq1"
	// lastSeqTimeout bounds the look-up of the producer's last batch on
	// the stream at start.
	lastSeqTimeout = 2 * time.Second
)

// bootIDPath is the running kernel's boot id on Linux.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// numbering assigns a producer's batch seqs and persists them as described
// above. Owned by the publisher's Run goroutine after NewPublisher.
type numbering struct {
	dir     string
	id      string
	boot    [16]byte // zero when unknown
	crc     *crc32.Table
	f       *seqFile // "seq", written in place
	last    uint64   // last seq assigned
	ceiling uint64   // durably reserved: no seq above it is assigned
	resumed bool     // the next batch is the first after a jump to the ceiling
	buf     [seqFileSize]byte
	err     error // the last persistence error, reported once
}

// openNumbering reads or creates the producer id in dir and works out the
// last seq assigned from the seq files there; openProducer raises it
// further from the spool and the stream.
func openNumbering(dir string) (*numbering, error) {
	n := &numbering{dir: dir, crc: crc32.MakeTable(crc32.Castagnoli), boot: bootID()}
	id, err := loadProducerID(dir)
	if err != nil {
		return nil, err
	}
	n.id = id
	ceil, exact, ceilOK := n.load(ceilingName)
	last, boot, seqOK := n.loadSeq()
	switch {
	case seqOK && n.boot != [16]byte{} && boot == n.boot:
		n.last = last // exact: the page cache outlives a killed process
	case ceilOK:
		n.last = ceil
		n.resumed = !exact && ceil > 0
	case seqOK:
		n.last = last // a ceiling lost to damage: the best we have
	}
	n.ceiling = max(ceil, n.last)
	f, err := openSeqFile(filepath.Join(dir, seqName))
	if err != nil {
		return nil, err
	}
	n.f = f
	return n, nil
}

// raiseTo makes seq the last seq assigned when it is higher: seqs found on
// the stream or in the spool that the local files did not know of.
func (n *numbering) raiseTo(seq uint64) {
	if seq > n.last {
		n.last = seq
		n.ceiling = max(n.ceiling, seq)
	}
}

// next assigns the next seq, raising the durable ceiling first when it is
// reached, and records it in "seq". resumed reports whether the batch is
// the first after a jump over reserved seqs. A failure to persist is
// returned (once per kind of failure) but the seq is still assigned: usage
// events are not held back for it.
func (n *numbering) next() (seq uint64, resumed bool, err error) {
	seq = n.last + 1
	if seq > n.ceiling {
		err = n.reserve()
	}
	n.last = seq
	resumed, n.resumed = n.resumed, false
	if werr := n.writeSeq(); werr != nil && err == nil {
		err = werr
	}
	if err != nil && n.err != nil && err.Error() == n.err.Error() {
		return seq, resumed, nil // reported already
	}
	n.err = err
	return seq, resumed, err
}

// reserve raises the durable ceiling ceilingBlock seqs above the last
// one assigned.
func (n *numbering) reserve() error {
	c := n.last + ceilingBlock
	if err := n.store(ceilingName, c, false, true); err != nil {
		return err
	}
	n.ceiling = c
	return nil
}

// close records the last seq assigned as an exact ceiling, durably, so the
// next start continues right after it whatever happens to the machine
// meanwhile.
func (n *numbering) close() error {
	err := n.writeSeq()
	if serr := n.f.Sync(); err == nil {
		err = serr
	}
	if cerr := n.f.Close(); err == nil {
		err = cerr
	}
	if serr := n.store(ceilingName, n.last, true, true); err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("close producer seq: %w", err)
	}
	n.ceiling = n.last
	return nil
}

func (n *numbering) encode(seq uint64, exact bool) []byte {
	b := n.buf[:0]
	b = binary.LittleEndian.AppendUint32(b, seqMagic)
	b = binary.LittleEndian.AppendUint64(b, seq)
	if exact {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = append(b, n.boot[:]...)
	b = append(b, byte(len(n.id)))
	b = append(b, n.id...)
	b = b[:seqFileSize-4]
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, n.crc))
	return b
}

// decode reads what encode wrote, for this producer only.
func (n *numbering) decode(b []byte) (seq uint64, exact bool, boot [16]byte, ok bool) {
	if len(b) != seqFileSize || binary.LittleEndian.Uint32(b) != seqMagic {
		return 0, false, boot, false
	}
	if crc32.Checksum(b[:seqFileSize-4], n.crc) != binary.LittleEndian.Uint32(b[seqFileSize-4:]) {
		return 0, false, boot, false
	}
	idLen := int(b[29])
	if idLen > maxProducerID || string(b[30:30+idLen]) != n.id {
		return 0, false, boot, false
	}
	copy(boot[:], b[13:29])
	return binary.LittleEndian.Uint64(b[4:]), b[12] == 1, boot, true
}

func (n *numbering) load(name string) (seq uint64, exact, ok bool) {
	b, err := os.ReadFile(filepath.Join(n.dir, name))
	if err != nil {
		return 0, false, false
	}
	seq, exact, _, ok = n.decode(b)
	return seq, exact, ok
}

func (n *numbering) loadSeq() (seq uint64, boot [16]byte, ok bool) {
	b, err := os.ReadFile(filepath.Join(n.dir, seqName))
	if err != nil {
		return 0, boot, false
	}
	seq, _, boot, ok = n.decode(b)
	return seq, boot, ok
}

// writeSeq overwrites "seq" in place with the last seq assigned.
func (n *numbering) writeSeq() error {
	if err := n.f.write(n.encode(n.last, false)); err != nil {
		return fmt.Errorf("write producer seq: %w", err)
	}
	return nil
}

// store writes a seq file with write-temp-then-rename, fsynced when
// durable.
func (n *numbering) store(name string, seq uint64, exact, durable bool) error {
	if err := writeFileAtomic(n.dir, name, n.encode(seq, exact), durable); err != nil {
		return fmt.Errorf("write producer seq ceiling: %w", err)
	}
	return nil
}

// loadProducerID returns the producer id kept in dir, creating it when the
// file is absent. A damaged file is an error rather than a silent new
// identity.
func loadProducerID(dir string) (string, error) {
	path := filepath.Join(dir, producerName)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := string(bytes.TrimSpace(b))
		if !ValidProducerID(id) {
			return "", fmt.Errorf("producer id file %s: invalid id %q (delete the file to start a new producer)", path, id)
		}
		return id, nil
	case errors.Is(err, os.ErrNotExist):
		id := NewProducerID()
		if err := writeFileAtomic(dir, producerName, []byte(id+"\n"), true); err != nil {
			return "", fmt.Errorf("write producer id: %w", err)
		}
		return id, nil
	default:
		return "", fmt.Errorf("read producer id: %w", err)
	}
}

// writeFileAtomic replaces dir/name with data: write a temp file, fsync it
// (when durable), rename it over the old one, fsync the directory (when
// durable).
func writeFileAtomic(dir, name string, data []byte, durable bool) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	if durable {
		return syncDir(dir)
	}
	return nil
}

// bootID returns the running kernel's boot id, or zero when there is none.
func bootID() [16]byte {
	var id [16]byte
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return id
	}
	var n int
	for _, c := range bytes.TrimSpace(b) {
		if c == '-' {
			continue
		}
		v, ok := hexVal(c)
		if !ok || n >= 32 {
			return [16]byte{}
		}
		id[n/2] |= v << (4 * (1 - n%2))
		n++
	}
	if n != 32 {
		return [16]byte{}
	}
	return id
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// lastStreamSeq is a reader of a subject's last message on the usage stream.
type lastStreamSeq interface {
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
}

// streamTop returns the seq of the last batch of producer on the usage
// stream, or 0 when there is none or the stream does not answer in time.
func streamTop(js lastStreamSeq, producer string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), lastSeqTimeout)
	defer cancel()
	st, err := js.Stream(ctx, StreamName)
	if err != nil {
		return 0
	}
	m, err := st.GetLastMsgForSubject(ctx, BatchSubject(producer))
	if err != nil {
		return 0
	}
	id, seq, _ := batchHeader(m.Data)
	if id != producer {
		return 0
	}
	return seq
}

// batchHeader reads the producer id and seq of an encoded batch without
// decoding its events; ok is false for anything else (a legacy event).
func batchHeader(b []byte) (producer string, seq uint64, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", 0, false
		}
		b = b[n:]
		switch {
		case num == fieldProducerID && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", 0, false
			}
			producer, b = string(v), b[n:]
			continue
		case num == fieldSeq && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return "", 0, false
			}
			seq, b = v, b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", 0, false
		}
		b = b[n:]
	}
	return producer, seq, producer != "" && seq != 0
}

// openProducer opens the numbering of the producer whose spool is sp (in
// dir), raised above every seq of it in the spool and, when NATS is
// connected, on the stream. It also returns the seq of the oldest batch in
// the spool (0 when there is none), from which the publish window starts.
func openProducer(js jetstream.JetStream, sp *spool, dir string) (*numbering, uint64, error) {
	num, err := openNumbering(dir)
	if err != nil {
		return nil, 0, err
	}
	low, top, err := sp.batchSeqs(num.id)
	if err != nil {
		_ = num.f.Close()
		return nil, 0, err
	}
	num.raiseTo(top)
	if js.Conn().IsConnected() {
		num.raiseTo(streamTop(js, num.id))
	}
	// Reserve now rather than make the first batch wait for the fsync.
	if num.ceiling <= num.last {
		if err := num.reserve(); err != nil {
			_ = num.f.Close()
			return nil, 0, err
		}
	}
	return num, low, nil
}
