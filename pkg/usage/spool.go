package usage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// Spool layout. A spool directory holds segment files named
// <20-digit id>.seg, appended to in id order; only the last one is written.
// Each record is [u32 length][u32 crc32c(payload)][payload], little endian.
// The file "offset" holds the read position of the oldest undrained record;
// bytes the reader could not parse are appended to <id>.bad next to their
// segment.
const (
	recHeader   = 8
	maxRecord   = 4 << 20  // largest payload accepted, in bytes
	maxSegment  = 16 << 20 // segment size at which a new segment starts
	readChunk   = 256 << 10
	writeChunk  = 256 << 10
	segExt      = ".seg"
	badExt      = ".bad"
	offsetName  = "offset"
	offsetSize  = 20 // u64 segment id, u64 offset, u32 crc32c
	segNameSize = 20
)

// errSpoolFull reports that an append would take the spool over its byte limit.
var errSpoolFull = errors.New("usage spool full")

// spoolPos is a position in the spool: a segment id and a byte offset in it.
type spoolPos struct {
	seg uint64
	off int64
}

// spoolRec is one record read from the spool. payload aliases the spool's
// read buffer and is valid until the next read.
type spoolRec struct {
	payload    []byte
	start, end spoolPos
}

type segment struct {
	id   uint64
	size int64 // bytes appended, including those still in the write buffer
}

// spool is an append-only, crash-tolerant queue of byte records on disk.
// It is not safe for concurrent use: the publisher goroutine owns it. The
// atomic counters may be read from any goroutine.
type spool struct {
	dir      string
	maxBytes int64
	segMax   int64
	crc      *crc32.Table

	segs    []segment // ascending id; the last one is the active segment
	w       *os.File  // active segment
	flushed int64     // bytes of the active segment written to the file
	wbuf    []byte    // appended records not yet written
	wrecs   int64     // records in wbuf
	dirty   bool      // written since the last fsync
	disk    int64     // bytes of all segments

	rpos spoolPos // committed read position
	r    *os.File // read handle of segment rid
	rid  uint64
	rbuf []byte

	unread  atomic.Int64 // bytes appended and not yet committed as read
	torn    atomic.Int64 // torn records truncated on open
	corrupt atomic.Int64 // corrupt spans moved aside
	lost    atomic.Int64 // records appended but lost to a write error
}

// openSpool opens or creates the spool in dir, truncating a torn final
// record (moving its bytes to a .bad file) left by a crash mid-write.
func openSpool(dir string, maxBytes int64) (*spool, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create spool dir: %w", err)
	}
	s := &spool{
		dir:      dir,
		maxBytes: maxBytes,
		segMax:   min(max(maxBytes/4, 1), maxSegment),
		crc:      crc32.MakeTable(crc32.Castagnoli),
	}
	ids, err := s.listSegments()
	if err != nil {
		return nil, err
	}
	pos := s.loadOffset()
	// Segments before the persisted position were drained; a crash came
	// between persisting the offset and removing them.
	for len(ids) > 0 && ids[0] < pos.seg {
		if err := os.Remove(s.segPath(ids[0])); err != nil {
			return nil, fmt.Errorf("remove drained segment: %w", err)
		}
		ids = ids[1:]
	}
	if len(ids) == 0 {
		ids = append(ids, max(pos.seg, 1))
		if err := s.createSegment(ids[0]); err != nil {
			return nil, err
		}
	}
	if ids[0] != pos.seg {
		pos = spoolPos{seg: ids[0]}
	}
	for _, id := range ids {
		fi, err := os.Stat(s.segPath(id))
		if err != nil {
			return nil, fmt.Errorf("stat spool segment: %w", err)
		}
		s.segs = append(s.segs, segment{id: id, size: fi.Size()})
		s.disk += fi.Size()
	}
	if err := s.recoverTail(); err != nil {
		return nil, err
	}
	last := &s.segs[len(s.segs)-1]
	w, err := os.OpenFile(s.segPath(last.id), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open spool segment: %w", err)
	}
	s.w, s.flushed = w, last.size
	pos.off = min(pos.off, s.segs[0].size)
	s.rpos = pos
	s.unread.Store(s.disk - pos.off)
	return s, nil
}

func (s *spool) segPath(id uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d%s", id, segExt))
}

func (s *spool) listSegments() ([]uint64, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list spool dir: %w", err)
	}
	var ids []uint64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), segExt)
		if !ok || len(name) != segNameSize || !e.Type().IsRegular() {
			continue
		}
		id, err := strconv.ParseUint(name, 10, 64)
		if err != nil || id == 0 {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

func (s *spool) createSegment(id uint64) error {
	f, err := os.OpenFile(s.segPath(id), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("create spool segment: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create spool segment: %w", err)
	}
	return syncDir(s.dir)
}

// loadOffset reads the persisted read position. A missing or damaged file
// yields the zero position, which means "the oldest segment": at worst some
// drained events are published again and deduplicated downstream.
func (s *spool) loadOffset() spoolPos {
	b, err := os.ReadFile(filepath.Join(s.dir, offsetName))
	if err != nil || len(b) != offsetSize {
		return spoolPos{}
	}
	if crc32.Checksum(b[:16], s.crc) != binary.LittleEndian.Uint32(b[16:]) {
		return spoolPos{}
	}
	off := binary.LittleEndian.Uint64(b[8:16])
	if off > 1<<62 {
		return spoolPos{}
	}
	return spoolPos{seg: binary.LittleEndian.Uint64(b[:8]), off: int64(off)}
}

// storeOffset persists the read position with write-temp-then-rename. It
// fsyncs only when durable is set: losing the latest position to a power
// cut republishes a few events, which the stream deduplicates.
func (s *spool) storeOffset(durable bool) error {
	var b [offsetSize]byte
	binary.LittleEndian.PutUint64(b[:8], s.rpos.seg)
	binary.LittleEndian.PutUint64(b[8:16], uint64(s.rpos.off))
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(b[:16], s.crc))
	tmp := filepath.Join(s.dir, offsetName+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("write spool offset: %w", err)
	}
	_, err = f.Write(b[:])
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write spool offset: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, offsetName)); err != nil {
		return fmt.Errorf("write spool offset: %w", err)
	}
	if durable {
		return syncDir(s.dir)
	}
	return nil
}

// recoverTail checks the records of the last segment. Only that segment can
// hold a torn record: earlier ones were fsynced before the next was started.
// An invalid record followed by valid ones is corruption, left for the
// reader to move aside; one with nothing valid after it is a torn write,
// moved to the .bad file and truncated.
func (s *spool) recoverTail() error {
	last := &s.segs[len(s.segs)-1]
	data, err := os.ReadFile(s.segPath(last.id))
	if err != nil {
		return fmt.Errorf("read spool segment: %w", err)
	}
	off := 0
	for off < len(data) {
		n, ok := s.validAt(data, off)
		if !ok {
			break
		}
		off += n
	}
	if off == len(data) || s.resync(data, off+1) >= 0 {
		return nil
	}
	if err := s.moveBad(last.id, data[off:]); err != nil {
		return err
	}
	if err := os.Truncate(s.segPath(last.id), int64(off)); err != nil {
		return fmt.Errorf("truncate torn spool record: %w", err)
	}
	s.torn.Add(1)
	s.disk -= last.size - int64(off)
	last.size = int64(off)
	return nil
}

// validAt reports whether a complete record with a matching checksum starts
// at data[off], and its size.
func (s *spool) validAt(data []byte, off int) (int, bool) {
	if len(data)-off < recHeader {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(data[off:])
	if n == 0 || n > maxRecord || uint64(len(data)-off-recHeader) < uint64(n) {
		return 0, false
	}
	payload := data[off+recHeader : off+recHeader+int(n)]
	if crc32.Checksum(payload, s.crc) != binary.LittleEndian.Uint32(data[off+4:]) {
		return 0, false
	}
	return recHeader + int(n), true
}

// resync returns the offset of the first valid record at or after from,
// or -1.
func (s *spool) resync(data []byte, from int) int {
	for o := from; o+recHeader < len(data); o++ {
		if _, ok := s.validAt(data, o); ok {
			return o
		}
	}
	return -1
}

// moveBad appends b to the .bad file of segment id, so that bytes the spool
// cannot use are set aside rather than silently lost.
func (s *spool) moveBad(id uint64, b []byte) error {
	name := filepath.Join(s.dir, fmt.Sprintf("%020d%s", id, badExt))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("move corrupt spool bytes aside: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("move corrupt spool bytes aside: %w", err)
	}
	return nil
}

// hasData reports whether the spool holds records not yet committed as read.
func (s *spool) hasData() bool { return s.unread.Load() > 0 }

// unsynced reports whether records are buffered or written since the last
// fsync: the next sync has work.
func (s *spool) unsynced() bool { return len(s.wbuf) > 0 || s.dirty }

// append adds one record. It returns errSpoolFull when the record would take
// the spool over its limit. The record reaches the file on the next flush
// (or when the write buffer fills) and the disk on the next sync.
func (s *spool) append(payload []byte) error {
	if len(payload) == 0 || len(payload) > maxRecord {
		return fmt.Errorf("spool record of %d bytes: out of range", len(payload))
	}
	n := int64(recHeader + len(payload))
	if s.disk+n > s.maxBytes {
		return errSpoolFull
	}
	if act := s.segs[len(s.segs)-1]; act.size > 0 && act.size+n > s.segMax {
		if err := s.rotate(); err != nil {
			return err
		}
	}
	s.wbuf = binary.LittleEndian.AppendUint32(s.wbuf, uint32(len(payload)))
	s.wbuf = binary.LittleEndian.AppendUint32(s.wbuf, crc32.Checksum(payload, s.crc))
	s.wbuf = append(s.wbuf, payload...)
	s.wrecs++
	s.segs[len(s.segs)-1].size += n
	s.disk += n
	s.unread.Add(n)
	if len(s.wbuf) >= writeChunk {
		return s.flush()
	}
	return nil
}

// flush writes the buffered records to the active segment. On a write error
// the segment is cut back to its last good size and the buffered records
// are counted as lost.
func (s *spool) flush() error {
	if len(s.wbuf) == 0 {
		return nil
	}
	_, err := s.w.WriteAt(s.wbuf, s.flushed)
	if err != nil {
		n := int64(len(s.wbuf))
		_ = s.w.Truncate(s.flushed) // best effort: open cuts a torn tail anyway
		s.segs[len(s.segs)-1].size -= n
		s.disk -= n
		s.unread.Add(-n)
		s.lost.Add(s.wrecs)
		s.wbuf, s.wrecs = s.wbuf[:0], 0
		return fmt.Errorf("write spool segment: %w", err)
	}
	s.flushed += int64(len(s.wbuf))
	s.wbuf, s.wrecs = s.wbuf[:0], 0
	s.dirty = true
	return nil
}

// sync flushes and fsyncs the active segment.
func (s *spool) sync() error {
	err := s.flush()
	if !s.dirty {
		return err
	}
	if serr := s.w.Sync(); serr != nil {
		return fmt.Errorf("sync spool segment: %w", serr)
	}
	s.dirty = false
	return err
}

// rotate seals the active segment (fsynced) and starts the next one.
func (s *spool) rotate() error {
	if err := s.sync(); err != nil {
		return err
	}
	return s.startSegment()
}

// startSegment makes a new, empty segment the active one.
func (s *spool) startSegment() error {
	id := s.segs[len(s.segs)-1].id + 1
	if err := s.createSegment(id); err != nil {
		return err
	}
	w, err := os.OpenFile(s.segPath(id), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open spool segment: %w", err)
	}
	if err := s.w.Close(); err != nil {
		_ = w.Close()
		return fmt.Errorf("close spool segment: %w", err)
	}
	s.w, s.flushed = w, 0
	s.segs = append(s.segs, segment{id: id})
	return nil
}

// read returns up to maxRecs records from the committed read position, all from
// one segment, and the position after them. A corrupt record is moved aside
// and skipped by a read of its own, which returns no records and a next
// position past the damage.
func (s *spool) read(maxRecs int) (recs []spoolRec, next spoolPos, err error) {
	if maxRecs <= 0 {
		return nil, s.rpos, nil
	}
	if err := s.flush(); err != nil {
		return nil, s.rpos, err
	}
	pos := s.rpos
	i := s.segIndex(pos.seg)
	for {
		if pos.off < s.limit(i) {
			break
		}
		if i == len(s.segs)-1 {
			return nil, pos, nil
		}
		i++
		pos = spoolPos{seg: s.segs[i].id}
	}
	limit := s.limit(i)
	want := min(limit-pos.off, readChunk)
	buf, err := s.readAt(pos, want)
	if err != nil {
		return nil, s.rpos, err
	}
	p := 0
	for len(recs) < maxRecs && len(buf)-p >= recHeader {
		n := int64(binary.LittleEndian.Uint32(buf[p:]))
		at := pos.off + int64(p)
		if n == 0 || n > maxRecord || at+recHeader+n > limit {
			if len(recs) > 0 {
				break // let the next read deal with it on its own
			}
			next, err := s.skipCorrupt(spoolPos{seg: pos.seg, off: at}, limit)
			return nil, next, err
		}
		if int64(len(buf)-p) < recHeader+n {
			if p > 0 {
				break
			}
			// A record larger than the chunk: read exactly it.
			if buf, err = s.readAt(pos, recHeader+n); err != nil {
				return nil, s.rpos, err
			}
			if int64(len(buf)) < recHeader+n { // the file is shorter than it was
				next, err := s.skipCorrupt(pos, limit)
				return nil, next, err
			}
		}
		rec := buf[p : p+recHeader+int(n)]
		if crc32.Checksum(rec[recHeader:], s.crc) != binary.LittleEndian.Uint32(rec[4:]) {
			// The length itself may be what is damaged: resynchronise
			// rather than trust it.
			if len(recs) > 0 {
				break
			}
			next, err := s.skipCorrupt(spoolPos{seg: pos.seg, off: at}, limit)
			return nil, next, err
		}
		start := spoolPos{seg: pos.seg, off: at}
		p += len(rec)
		recs = append(recs, spoolRec{payload: rec[recHeader:], start: start, end: spoolPos{seg: pos.seg, off: at + int64(len(rec))}})
	}
	if p == 0 {
		// Not even a header's worth of bytes before the segment's end.
		next, err := s.skipCorrupt(pos, limit)
		return nil, next, err
	}
	return recs, spoolPos{seg: pos.seg, off: pos.off + int64(p)}, nil
}

// limit is how far segment i can be read: the active segment only up to
// what has been written to the file.
func (s *spool) limit(i int) int64 {
	if i == len(s.segs)-1 {
		return s.flushed
	}
	return s.segs[i].size
}

func (s *spool) segIndex(id uint64) int {
	for i, sg := range s.segs {
		if sg.id == id {
			return i
		}
	}
	return 0
}

func (s *spool) readAt(pos spoolPos, n int64) ([]byte, error) {
	if s.r == nil || s.rid != pos.seg {
		if s.r != nil {
			_ = s.r.Close()
		}
		f, err := os.Open(s.segPath(pos.seg))
		if err != nil {
			s.r = nil
			return nil, fmt.Errorf("open spool segment: %w", err)
		}
		s.r, s.rid = f, pos.seg
	}
	if int64(cap(s.rbuf)) < n {
		s.rbuf = make([]byte, n)
	}
	buf := s.rbuf[:n]
	m, err := s.r.ReadAt(buf, pos.off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read spool segment: %w", err)
	}
	return buf[:m], nil
}

// skipCorrupt handles a record header that cannot be right: it moves the
// bytes up to the next valid record (or the end of the segment) aside and
// returns the position after them.
func (s *spool) skipCorrupt(pos spoolPos, limit int64) (spoolPos, error) {
	data, err := s.readAt(pos, limit-pos.off)
	if err != nil {
		return s.rpos, err
	}
	// Without a valid record further on, the rest of the segment is
	// unusable, including any bytes a shortened file no longer has.
	n, next := len(data), limit
	if o := s.resync(data, 1); o >= 0 {
		n, next = o, pos.off+int64(o)
	}
	if n > 0 {
		if err := s.moveBad(pos.seg, data[:n]); err != nil {
			return s.rpos, err
		}
	}
	s.corrupt.Add(1)
	return spoolPos{seg: pos.seg, off: next}, nil
}

// commit records that everything before pos was published. It persists the
// position, removes fully drained segments and, when the whole spool is
// drained, starts a fresh segment so the files do not grow forever.
func (s *spool) commit(pos spoolPos) error {
	s.rpos = pos
	last := s.segs[len(s.segs)-1]
	if pos.seg == last.id && pos.off == last.size && last.size > 0 {
		// Fully drained: nothing to seal, the old segment goes away.
		if err := s.startSegment(); err != nil {
			return err
		}
		s.rpos = spoolPos{seg: last.id + 1}
	}
	if err := s.storeOffset(false); err != nil {
		return err
	}
	var unread int64
	keep := s.segs[:0]
	var rmErr error
	for _, sg := range s.segs {
		if sg.id >= s.rpos.seg {
			keep = append(keep, sg)
			unread += sg.size
			continue
		}
		if s.r != nil && s.rid == sg.id {
			_ = s.r.Close()
			s.r = nil
		}
		if err := os.Remove(s.segPath(sg.id)); err != nil && rmErr == nil {
			rmErr = fmt.Errorf("remove drained spool segment: %w", err)
		}
		s.disk -= sg.size
	}
	s.segs = keep
	s.unread.Store(unread - s.rpos.off)
	return rmErr
}

// close flushes, fsyncs and closes the spool, persisting the read position.
func (s *spool) close() error {
	err := s.sync()
	if oerr := s.storeOffset(true); err == nil {
		err = oerr
	}
	if s.r != nil {
		_ = s.r.Close()
		s.r = nil
	}
	if cerr := s.w.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close spool segment: %w", cerr)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync spool dir: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync spool dir: %w", err)
	}
	return nil
}

// batchSeqs returns the seq of the first batch not yet drained (of any
// producer) and the highest seq of producer's batches in the spool, each
// 0 when there is none. It reads the spool's files without changing them
// (damage is left for the reader to move aside); it is meant for start-up,
// when nothing is buffered.
func (s *spool) batchSeqs(producer string) (low, top uint64, err error) {
	for i := s.segIndex(s.rpos.seg); i < len(s.segs) && low == 0; i++ {
		off := int64(0)
		if s.segs[i].id == s.rpos.seg {
			off = s.rpos.off
		}
		err := s.eachRecord(i, off, func(payload []byte) bool {
			if _, seq, ok := batchHeader(payload); ok {
				low = seq
				return false
			}
			return true
		})
		if err != nil {
			return 0, 0, err
		}
	}
	// Batches are spooled in seq order: the last one is the highest.
	for i := len(s.segs) - 1; i >= 0 && top == 0; i-- {
		err := s.eachRecord(i, 0, func(payload []byte) bool {
			if id, seq, ok := batchHeader(payload); ok && id == producer {
				top = max(top, seq)
			}
			return true
		})
		if err != nil {
			return 0, 0, err
		}
	}
	return low, top, nil
}

// eachRecord calls fn with the payload of each intact record of segment i
// from offset off on, until fn returns false. Damaged bytes are skipped.
func (s *spool) eachRecord(i int, off int64, fn func(payload []byte) bool) error {
	if s.segs[i].size <= off {
		return nil
	}
	data, err := os.ReadFile(s.segPath(s.segs[i].id))
	if err != nil {
		return fmt.Errorf("read spool segment: %w", err)
	}
	for o := int(off); o < len(data); {
		n, ok := s.validAt(data, o)
		if !ok {
			if o = s.resync(data, o+1); o < 0 {
				break
			}
			continue
		}
		if !fn(data[o+recHeader : o+n]) {
			break
		}
		o += n
	}
	return nil
}
