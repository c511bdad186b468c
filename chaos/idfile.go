package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// ID files. A client of the ids backend records every ID it is handed in
// ids-<proc>.bin, an append-only binary file (10 million IDs as JSON lines
// would be a gigabyte): a magic string, then blocks. A block is the IDs of
// one generator call (one Snowflake.NextN, or a run of Segment.Next calls),
// with the call's monotonic start and end, so the checker can tell which
// lease an ID was issued under and whether its call began after a loss.
// Integers are big-endian.
//
//	file   = magic block*
//	magic  = "CKIDS1\n\x00"             8 bytes
//	block  = header id{count}
//	header = 40 bytes
//	   0  uint32  0x49444231 ("IDB1")   block marker
//	   4  uint8   part                  1 Snowflake on a ZooKeeper lease, 2 on a Redis lease, 3 Redis segments,
//	                                    4 sqlid segments on MariaDB, 5 on PostgreSQL (sqlidwl.go)
//	   5  uint8   goroutine             within the process
//	   6  uint16  0                     reserved
//	   8  uint32  count                 IDs that follow
//	  12  uint32  lease                 the process's lease number for the part: 1, 2, … (0: segments)
//	  16  int64   worker                the leased worker ID (-1: segments)
//	  24  int64   start                 CLOCK_MONOTONIC ns just before the call
//	  32  int64   end                   CLOCK_MONOTONIC ns just after it returned
//	id     = int64                      8 bytes
//
// A writer buffers whole blocks and appends them with one write(2) (O_APPEND)
// when its buffer fills or is flushed, so a process killed with SIGKILL
// leaves whole blocks (its unflushed buffer is lost: those IDs are not in the
// history, as an operation whose answer never came). A reader drops a torn
// last block and fails on anything else malformed.
const (
	idMagic       = "CKIDS1\n\x00"
	blockMarker   = 0x49444231
	blockHeadSize = 40
	maxBlockIDs   = 1 << 16 // a sanity bound for readers
)

// Parts of the ids workload, as stored in a block.
const (
	partZK    uint8 = 1 // Snowflake on a worker ID leased through ZooKeeper
	partRedis uint8 = 2 // Snowflake on a worker ID leased through Redis
	partSeg   uint8 = 3 // redisid Segments
)

var partNames = map[uint8]string{partZK: "zk", partRedis: "redis", partSeg: "seg"}

// BlockHeader describes one block of IDs.
type BlockHeader struct {
	Part   uint8
	G      uint8
	Count  uint32
	Lease  uint32
	Worker int64
	Start  int64
	End    int64
}

func (h BlockHeader) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], blockMarker)
	b[4], b[5] = h.Part, h.G
	binary.BigEndian.PutUint16(b[6:], 0)
	binary.BigEndian.PutUint32(b[8:], h.Count)
	binary.BigEndian.PutUint32(b[12:], h.Lease)
	binary.BigEndian.PutUint64(b[16:], uint64(h.Worker))
	binary.BigEndian.PutUint64(b[24:], uint64(h.Start))
	binary.BigEndian.PutUint64(b[32:], uint64(h.End))
}

func parseHeader(b []byte) (BlockHeader, error) {
	if m := binary.BigEndian.Uint32(b[0:]); m != blockMarker {
		return BlockHeader{}, fmt.Errorf("bad block marker %#x", m)
	}
	h := BlockHeader{Part: b[4], G: b[5], Count: binary.BigEndian.Uint32(b[8:]),
		Lease: binary.BigEndian.Uint32(b[12:]), Worker: int64(binary.BigEndian.Uint64(b[16:])),
		Start: int64(binary.BigEndian.Uint64(b[24:])), End: int64(binary.BigEndian.Uint64(b[32:]))}
	if partNames[h.Part] == "" {
		return h, fmt.Errorf("unknown part %d", h.Part)
	}
	if h.Count > maxBlockIDs {
		return h, fmt.Errorf("block of %d IDs", h.Count)
	}
	return h, nil
}

// IDFile is an open ID file. Writers (one per goroutine) share it; each
// write(2) appends whole blocks. Safe for concurrent use.
type IDFile struct {
	mu sync.Mutex // protects f
	f  *os.File
}

// CreateIDFile creates the file at path with its magic string.
func CreateIDFile(path string) (*IDFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write([]byte(idMagic)); err != nil {
		f.Close()
		return nil, err
	}
	return &IDFile{f: f}, nil
}

func (f *IDFile) write(b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := f.f.Write(b)
	return err
}

// Close closes the file.
func (f *IDFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.f.Close()
}

// BlockWriter buffers one goroutine's blocks; not safe for concurrent use.
type BlockWriter struct {
	f     *IDFile
	buf   []byte
	limit int
}

// NewBlockWriter returns a writer that appends to f once limit bytes are buffered.
func (f *IDFile) NewBlockWriter(limit int) *BlockWriter {
	return &BlockWriter{f: f, buf: make([]byte, 0, limit+blockHeadSize+8*256), limit: limit}
}

// Add buffers one block of ids (at least one).
func (w *BlockWriter) Add(h BlockHeader, ids []int64) error {
	h.Count = uint32(len(ids))
	n := len(w.buf)
	w.buf = w.buf[:n+blockHeadSize]
	h.put(w.buf[n:])
	for _, id := range ids {
		w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(id))
	}
	if len(w.buf) >= w.limit {
		return w.Flush()
	}
	return nil
}

// Flush appends the buffered blocks to the file.
func (w *BlockWriter) Flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.f.write(w.buf)
	w.buf = w.buf[:0]
	return err
}

// ReadIDFile calls fn for every block of the file at path, in file order;
// ids is reused between calls. A torn last block is skipped.
func ReadIDFile(path string, fn func(h BlockHeader, ids []int64) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return readIDs(bufio.NewReaderSize(f, 1<<20), path, fn)
}

func readIDs(r io.Reader, name string, fn func(h BlockHeader, ids []int64) error) error {
	magic := make([]byte, len(idMagic))
	if _, err := io.ReadFull(r, magic); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // created, killed before the magic: nothing in it
		}
		return fmt.Errorf("chaos: %s: magic: %w", name, err)
	}
	if string(magic) != idMagic {
		return fmt.Errorf("chaos: %s: not an ID file", name)
	}
	head := make([]byte, blockHeadSize)
	var raw []byte
	var ids []int64
	for n := 0; ; n++ {
		if _, err := io.ReadFull(r, head); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil // the last header is cut short
			}
			return err
		}
		h, err := parseHeader(head)
		if err != nil {
			return fmt.Errorf("chaos: %s: block %d: %w", name, n, err)
		}
		if need := 8 * int(h.Count); cap(raw) < need {
			raw = make([]byte, need)
		} else {
			raw = raw[:need]
		}
		if _, err := io.ReadFull(r, raw); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return nil // the file ends inside its last block: torn by a kill
			}
			return err
		}
		ids = ids[:0]
		for i := range int(h.Count) {
			ids = append(ids, int64(binary.BigEndian.Uint64(raw[8*i:])))
		}
		if err := fn(h, ids); err != nil {
			return err
		}
	}
}
